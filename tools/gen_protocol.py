"""Generate the kafkatw/protocol/messages package from Kafka's JSON message schemas.

usage: python tools/gen_protocol.py ../shared/kafka-protocol/message kafkatw/protocol/messages
       python tools/gen_protocol.py --records ../shared/kafka-protocol/coordinator-records \
           kafkatw/protocol/coordinator_records.py

The package has one module per API (its request and response classes) or standalone schema,
and an ``__init__.py`` with the registries and a PEP 562 ``__getattr__`` that imports a module
on first use, so a process loads only the classes it uses (all of them cost ~10 MB RSS).
With ``--records`` it generates the on-disk key/value record classes of the coordinators'
internal topics instead (one module, no API registries; a record key/value is an int16
version followed by the struct at that version).

Each struct gets straight-line reader/writer functions per variant (``_r0``/``_w0`` for
non-flexible versions, ``_r1``/``_w1`` for flexible ones) with the version checks
specialised to the variant, fixed-width runs packed by one ``struct.Struct`` call. The
messages in ``ROW_MESSAGES`` (the responses of the hot paths) also get ``<Message>.Rows``: the
same message given as plain tuples, written by one function per version with every version
check resolved and nested arrays as inline loops (no objects built per request).
"""

import glob
import json
import keyword
import os
import re
import sys

INF = 0x7FFF

FIXED = {
    "int8": ("b", 1),
    "int16": ("h", 2),
    "int32": ("i", 4),
    "int64": ("q", 8),
    "uint16": ("H", 2),
    "uint32": ("I", 4),
    "float64": ("d", 8),
    "bool": ("?", 1),
    "uuid": ("16s", 16),
}
VARIABLE = ("string", "bytes", "records")
#: bytes of a length read with a fixed-width run (see StructGen._next_length_code)
FOLDED_SIZE = {"B": 1, "h": 2, "i": 4}
#: len(_runtime.RANGES): array lengths a reader loops over without making a range
CACHED_RANGES = 256


# ---------------------------------------------------------------------------
# schema model


def parse_versions(s):
    """'0+', '3-5', '7', 'none' -> (lo, hi) or None."""
    if s is None or s == "none":
        return None
    s = s.strip()
    if s.endswith("+"):
        return (int(s[:-1]), INF)
    if "-" in s:
        lo, hi = s.split("-")
        return (int(lo), int(hi))
    return (int(s), int(s))


def intersect(a, b):
    if a is None or b is None:
        return None
    lo, hi = max(a[0], b[0]), min(a[1], b[1])
    return (lo, hi) if lo <= hi else None


def covers(a, b):
    """a contains all of b."""
    return b is None or (a is not None and a[0] <= b[0] and a[1] >= b[1])


def snake(name):
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", s).lower()
    if keyword.iskeyword(s):
        s += "_"
    return s


def load_json(path):
    text = open(path, encoding="utf-8").read()
    lines = [l for l in text.split("\n") if not l.strip().startswith("//")]
    return json.loads("\n".join(lines))


class Field:
    def __init__(self, spec, msg):
        self.name = spec["name"]
        self.attr = snake(self.name)
        self.type = spec["type"]
        self.versions = parse_versions(spec.get("versions"))
        self.nullable = parse_versions(spec.get("nullableVersions"))
        self.tagged = parse_versions(spec.get("taggedVersions"))
        self.tag = int(spec["tag"]) if "tag" in spec else None
        self.ignorable = bool(spec.get("ignorable", False))
        self.flex_override = parse_versions(spec["flexibleVersions"]) if "flexibleVersions" in spec else "inherit"
        self.zero_copy = bool(spec.get("zeroCopy", False))
        self.raw_default = spec.get("default")
        self.is_array = self.type.startswith("[]")
        self.elem = self.type[2:] if self.is_array else None
        base = self.elem if self.is_array else self.type
        self.struct = None  # StructDef for struct or array-of-struct
        self.base = base
        if base not in FIXED and base not in VARIABLE:
            self.struct_name = base
        else:
            self.struct_name = None
        if self.tagged is not None:
            assert self.tagged[1] == INF or self.tagged == self.versions, (msg, self.name)
            assert self.tag is not None
        # regular (non-tagged) versions
        if self.tagged is None:
            self.regular = self.versions
        elif self.tagged == self.versions:
            self.regular = None
        else:
            self.regular = intersect(self.versions, (0, self.tagged[0] - 1))

    # -- defaults
    def default_src(self):
        """Python source of the default value (fresh for mutable kinds)."""
        d = self.raw_default
        if self.is_array:
            if d == "null":
                return "None"
            return "[]"
        if self.struct_name:
            if d == "null":
                return "None"
            return "%s()" % self.struct.alias
        t = self.type
        if t in ("int8", "int16", "int32", "int64", "uint16", "uint32"):
            return repr(int(str(d), 0)) if d is not None else "0"
        if t == "float64":
            return repr(float(d)) if d is not None else "0.0"
        if t == "bool":
            if d is None:
                return "False"
            return "True" if str(d).lower() == "true" else "False"
        if t == "uuid":
            return "_ZERO_UUID"
        if t == "string":
            if d == "null":
                return "None"
            return repr(d if d is not None else "")
        if t == "bytes":
            return "None" if d == "null" else "b''"
        if t == "records":
            if d == "null" or (d is None and self.nullable is not None):
                return "None"
            return "b''"
        raise AssertionError(t)

    def mutable_default(self):
        src = self.default_src()
        return src == "[]" or src.endswith("()")

    def is_default_src(self, expr):
        """Source of a boolean: expr equals the default."""
        src = self.default_src()
        if src == "None":
            return "%s is None" % expr
        if src == "[]":
            return "%s == []" % expr
        if src.endswith("()"):
            return "(%s is not None and %s._is_default())" % (expr, expr)
        return "%s == %s" % (expr, src)

    def schema_tuple(self):
        sub = self.struct.alias if self.struct else "None"
        return "(%r, %r, %r, %r, %r, %r, %r, %r, %s)" % (
            self.attr,
            self.type,
            self.versions,
            self.nullable,
            self.tagged,
            self.tag,
            self.ignorable,
            self.flex_override if self.flex_override != "inherit" else "inherit",
            sub,
        )


class StructDef:
    def __init__(self, name, fields_spec, msg, parent):
        self.name = name
        self.msg = msg
        self.parent = parent
        self.fields = [Field(f, msg.name) for f in fields_spec]
        self.alias = "_S_%s_%s" % (msg.name, name) if parent is not None else msg.name
        self.children = []


class Message:
    def __init__(self, spec):
        self.name = spec["name"]
        self.kind = spec["type"]
        self.api_key = spec.get("apiKey")
        self.valid = parse_versions(spec["validVersions"])
        self.flexible = parse_versions(spec.get("flexibleVersions", "none"))
        self.structs = {}  # name -> StructDef (nested + common)
        self.order = []
        self.root = StructDef(self.name, [], self, None)
        for cs in spec.get("commonStructs", []):
            sd = StructDef(cs["name"], [], self, self.root)
            self._register(sd)
            sd.fields = [Field(f, self.name) for f in cs["fields"]]
            self._walk(sd, cs["fields"])
        self.root.fields = [Field(f, self.name) for f in spec.get("fields", [])]
        self._walk(self.root, spec.get("fields", []))
        self._resolve(self.root)
        for sd in self.order:
            self._resolve(sd)

    def _register(self, sd):
        assert sd.name not in self.structs, (self.name, sd.name)
        assert sd.name != self.name
        self.structs[sd.name] = sd
        self.order.append(sd)

    def _walk(self, owner, fields_spec):
        for f in fields_spec:
            if "fields" in f:
                t = f["type"][2:] if f["type"].startswith("[]") else f["type"]
                sd = StructDef(t, f["fields"], self, owner)
                self._register(sd)
                owner.children.append(sd)
                self._walk(sd, f["fields"])

    def _resolve(self, sd):
        for f in sd.fields:
            if f.struct_name:
                f.struct = self.structs[f.struct_name]

    @property
    def api_name(self):
        for suf in ("Request", "Response"):
            if self.kind in ("request", "response") and self.name.endswith(suf):
                return self.name[: -len(suf)]
        return None


# ---------------------------------------------------------------------------
# code emission


class Emitter:
    def __init__(self):
        self.lines = []
        self.structs = {}  # fmt -> name
        self.ind = 0

    def __call__(self, line):
        self.lines.append("    " * self.ind + line if line else "")

    def struct(self, fmt):
        if fmt not in self.structs:
            self.structs[fmt] = "_T%d" % len(self.structs)
        return self.structs[fmt]


def cond(r, v):
    """Python boolean source for 'v in r' over variant range v; 'True'/'False' when static."""
    if r is None or intersect(r, v) is None:
        return "False"
    if covers(r, v):
        return "True"
    terms = []
    if r[0] > v[0]:
        terms.append("v >= %d" % r[0])
    if r[1] < v[1]:
        terms.append("v <= %d" % r[1])
    return " and ".join(terms)


def field_flexible(f, msg, V, flex):
    """Whether the field uses compact encodings in this variant: 'True'/'False'/expr."""
    if not flex:
        return "False"
    if f.flex_override == "inherit":
        return "True"
    return cond(f.flex_override, V)



def fixed_run(fields, i, c_reg, V):
    """The run of fixed-width scalar fields starting at ``fields[i]`` that share the presence
    condition ``c_reg`` (packed or unpacked with one struct call), and the index after it;
    ``([], i)`` when ``fields[i]`` does not start such a run."""
    f = fields[i]
    if f.base not in FIXED or f.is_array or c_reg == "False":
        return [], i
    j = i + 1
    while (j < len(fields) and fields[j].base in FIXED and not fields[j].is_array
           and cond(fields[j].regular, V) == c_reg):
        j += 1
    return fields[i:j], j

class StructGen:
    """Emit reader/writer for one struct in one variant."""

    def __init__(self, em, msg, sd, flex, V):
        self.em, self.msg, self.sd, self.flex, self.V = em, msg, sd, flex, V
        self.suffix = "1" if flex else "0"
        self.len_read = False  # the reader's next length already unpacked into n

    # ---- writer ------------------------------------------------------------
    def gen_writer(self):
        em, sd, V = self.em, self.sd, self.V
        em("def _w%s(self, buf, parts, v):" % self.suffix)
        em.ind += 1
        start = len(em.lines)
        fields = sd.fields
        i = 0
        while i < len(fields):
            f = fields[i]
            c_reg = cond(f.regular, V)
            run, j = fixed_run(fields, i, c_reg, V)
            if run:
                self._open(c_reg)
                fmt = ">" + "".join(FIXED[x.base][0] for x in run)
                em("buf += %s(%s)" % (em.struct(fmt) + "p", ", ".join("self." + x.attr for x in run)))
                self._close(c_reg)
                self._absent_checks(run, c_reg)
                i = j
                continue
            if c_reg != "False":
                self._open(c_reg)
                self._narrowed(f.regular, self.write_value, f, "self." + f.attr, "buf", "parts")
                self._close(c_reg)
            self._absent_checks([f], c_reg)
            i += 1
        if self.flex:
            tagged = sorted([f for f in fields if cond(f.tagged, V) != "False"], key=lambda f: f.tag)
            if not tagged:
                em("if self.unknown_tagged_fields:")
                em("    _write_tags(buf, [], self.unknown_tagged_fields)")
                em("else:")
                em("    buf.append(0)")
            else:
                em("tags = []")
                for f in tagged:
                    c = cond(f.tagged, V)
                    test = "not (%s)" % f.is_default_src("self." + f.attr)
                    em("if %s%s:" % ("" if c == "True" else "(%s) and " % c, test))
                    em.ind += 1
                    em("t = bytearray()")
                    self._narrowed(f.tagged, self.write_value, f, "self." + f.attr, "t", "None")
                    em("tags.append((%d, bytes(t)))" % f.tag)
                    em.ind -= 1
                em("if tags or self.unknown_tagged_fields:")
                em("    _write_tags(buf, tags, self.unknown_tagged_fields)")
                em("else:")
                em("    buf.append(0)")
        if len(em.lines) == start:
            em("pass")
        em.ind -= 1
        em("")

    def _narrowed(self, r, fn, *args):
        saved = self.V
        self.V = intersect(saved, r)
        try:
            fn(*args)
        finally:
            self.V = saved

    def _open(self, c):
        if c != "True":
            self.em("if %s:" % c)
            self.em.ind += 1

    def _close(self, c):
        if c != "True":
            self.em.ind -= 1

    def _absent_checks(self, run, c_reg):
        """Absent-field checks; in the else branch of the write when that is exact."""
        run = [f for f in run if not f.ignorable]
        if not run:
            return
        if c_reg not in ("True", "False") and all(f.tagged is None for f in run):
            self.em("else:")
            self.em.ind += 1
            for f in run:
                self.em("if not (%s):" % f.is_default_src("self." + f.attr))
                self.em("    raise _absent(self, %r, v)" % f.attr)
            self.em.ind -= 1
            return
        for f in run:
            self._absent_check(f)

    def _absent_check(self, f):
        if f.ignorable:
            return
        c_present = cond(f.versions, self.V)
        if c_present == "True":
            return
        c_abs = "True" if c_present == "False" else "not (%s)" % c_present
        test = "not (%s)" % f.is_default_src("self." + f.attr)
        self.em("if %s%s:" % ("" if c_abs == "True" else "(%s) and " % c_abs, test))
        self.em("    raise _absent(self, %r, v)" % f.attr)

    def _null_branch(self, f, buf, null_bytes):
        """Emit handling of x is None: write null if nullable (maybe conditionally) else raise."""
        em = self.em
        cn = cond(f.nullable, self.V)
        if cn == "True":
            em("%s += %r" % (buf, null_bytes))
        elif cn == "False":
            em("raise _not_nullable(self, %r, v)" % f.attr)
        else:
            em("if not (%s):" % cn)
            em("    raise _not_nullable(self, %r, v)" % f.attr)
            em("%s += %r" % (buf, null_bytes))

    def _len_prefix(self, fflex, buf, nexpr, classic_fmt):
        """Emit a length prefix for a non-null value of length nexpr."""
        em = self.em
        if fflex == "True":
            em("n = %s + 1" % nexpr)
            em("if n < 128:")
            em("    %s.append(n)" % buf)
            em("else:")
            em("    %s += _wuv(n)" % buf)
        elif fflex == "False":
            em("%s += %s(%s)" % (buf, "_pi16" if classic_fmt == "h" else "_pi32", nexpr))
        else:
            em("if %s:" % fflex)
            em.ind += 1
            self._len_prefix("True", buf, nexpr, classic_fmt)
            em.ind -= 1
            em("else:")
            em.ind += 1
            self._len_prefix("False", buf, nexpr, classic_fmt)
            em.ind -= 1

    def _null_bytes(self, fflex, classic):
        if fflex == "True":
            return b"\x00"
        if fflex == "False":
            return classic
        return None

    def write_value(self, f, expr, buf, parts):
        em = self.em
        V = self.V
        fflex = field_flexible(f, self.msg, V, self.flex)
        if f.is_array:
            em("x = %s" % expr)
            em("if x is None:")
            em.ind += 1
            self._write_null(f, fflex, buf, b"\xff\xff\xff\xff")
            em.ind -= 1
            em("else:")
            em.ind += 1
            self._len_prefix(fflex, buf, "len(x)", "i")
            if f.struct:
                em("for e in x:")
                em("    e._w%s(%s, %s, v)" % (self.suffix, buf, parts))
            elif f.elem in FIXED:
                code, size = FIXED[f.elem]
                if f.elem == "uuid":
                    em("for e in x:")
                    em("    %s += e" % buf)
                else:
                    em("%s += _pack('>%%d%s' %% len(x), *x)" % (buf, code))
            elif f.elem == "string":
                em("for e in x:")
                em.ind += 1
                em("e = e.encode()")
                self._len_prefix(fflex, buf, "len(e)", "h")
                em("%s += e" % buf)
                em.ind -= 1
            else:
                raise AssertionError(f.type)
            em.ind -= 1
        elif f.struct:
            cn = cond(f.nullable, V)
            if cn == "False":
                em("%s._w%s(%s, %s, v)" % (expr, self.suffix, buf, parts))
            else:
                em("x = %s" % expr)
                em("if x is None:")
                em.ind += 1
                self._null_branch(f, buf, b"\xff")
                em.ind -= 1
                em("else:")
                em("    %s.append(1)" % buf)
                em("    x._w%s(%s, %s, v)" % (self.suffix, buf, parts))
        elif f.type in FIXED:
            code, size = FIXED[f.type]
            em("%s += %s(%s)" % (buf, em.struct(">" + code) + "p", expr))
        elif f.type == "string":
            em("x = %s" % expr)
            em("if x is None:")
            em.ind += 1
            self._write_null(f, fflex, buf, b"\xff\xff")
            em.ind -= 1
            em("else:")
            em.ind += 1
            em("x = x.encode()")
            self._len_prefix(fflex, buf, "len(x)", "h")
            em("%s += x" % buf)
            em.ind -= 1
        elif f.type == "bytes":
            em("x = %s" % expr)
            em("if x is None:")
            em.ind += 1
            self._write_null(f, fflex, buf, b"\xff\xff\xff\xff")
            em.ind -= 1
            em("else:")
            em.ind += 1
            self._len_prefix(fflex, buf, "len(x)", "i")
            em("%s += x" % buf)
            em.ind -= 1
        elif f.type == "records":
            em("x = %s" % expr)
            em("if x is None:")
            em.ind += 1
            self._write_null(f, fflex, buf, b"\xff\xff\xff\xff")
            em.ind -= 1
            if parts != "None":
                # Fast path: a FileRegion becomes its own part, never read.
                em("elif type(x) is _FileRegion:")
                em.ind += 1
                self._len_prefix(fflex, buf, "x.count", "i")
                em("parts.append(bytes(%s))" % buf)
                em("del %s[:]" % buf)
                em("parts.append(x)")
                em.ind -= 1
            em("else:")
            em.ind += 1
            self._len_prefix(fflex, buf, "_records_size(x)", "i")
            em("_emit_records(%s, %s, x)" % (buf, parts))
            em.ind -= 1
        else:
            raise AssertionError(f.type)

    def _write_null(self, f, fflex, buf, classic):
        nb = self._null_bytes(fflex, classic)
        if nb is not None:
            self._null_branch(f, buf, nb)
        else:
            self.em("if %s:" % fflex)
            self.em.ind += 1
            self._null_branch(f, buf, b"\x00")
            self.em.ind -= 1
            self.em("else:")
            self.em.ind += 1
            self._null_branch(f, buf, classic)
            self.em.ind -= 1

    # ---- reader ------------------------------------------------------------
    def _read_default(self, f, target, depth=0):
        """Set ``target`` to ``f``'s default. A struct's default is built field by field on a
        bare ``_new`` object, not by calling its class: the ``__init__`` (keyword defaults,
        a Python frame) ran once per request for a tagged struct absent from it, such as
        Fetch v15+'s ``replica_state`` in every consumer's fetch."""
        if not f.struct_name or f.is_array or f.raw_default == "null":
            self.em("%s = %s" % (target, f.default_src()))
            return
        d = "_d%d" % depth
        self.em("%s = _new(%s)" % (d, f.struct.alias))
        for sub in f.struct.fields:
            self._read_default(sub, "%s.%s" % (d, sub.attr), depth + 1)
        self.em("%s.unknown_tagged_fields = _NO_TAGS" % d)
        self.em("%s = %s" % (target, d))

    # Names of a reader's variables at nesting depth d: the struct being read, the field and
    # array index being read (for the error's path), the list being built. A nested struct
    # read in a regular position is read inline by its parent's reader (no call, frame and
    # (obj, pos) tuple per element), one depth further.
    def _o(self):
        return "o%d" % self.d if self.d else "o"

    def _f(self, d=None):
        d = self.d if d is None else d
        return "f%d" % d if d else "f"

    def _ix(self, d=None):
        d = self.d if d is None else d
        return "_i%d" % d if d else "_i"

    def _lst(self):
        return "lst%d" % self.d if self.d else "lst"

    def gen_reader(self):
        em, sd = self.em, self.sd
        em("@staticmethod")
        em("def _r%s(buf, pos, v):" % self.suffix)
        em.ind += 1
        em("o = _new(%s)" % sd.alias)
        em("lb = len(buf)")
        em("f = ''")
        em("_i = -1")
        nested_names_at = len(em.lines)
        em("try:")
        em.ind += 1
        self.d = self.max_d = 0
        # nested structs inline in the message's own reader only (what a request decodes); a
        # nested class's reader (decode_from on it, a tagged struct field) calls its children's
        self.calls_nested = sd is not self.msg.root
        self._read_struct(sd)
        em.ind -= 1
        if self.max_d:
            # the nested depths' field names: None where no struct of that depth is being read
            ind = "    " * em.ind
            em.lines[nested_names_at:nested_names_at] = [
                "%s%s = None; %s = -1" % (ind, self._f(d), self._ix(d)) for d in range(1, self.max_d + 1)]
            levels = ", ".join("%s, %s" % (self._f(d), self._ix(d)) for d in range(self.max_d + 1))
            em("except _CATCH as e:")
            em("    raise _fail_in(e, %s) from None" % levels)
        else:
            em("except _CATCH as e:")
            em("    raise _fail(e, f, _i) from None")
        em("return o, pos")
        em.ind -= 1
        em("")

    def _read_struct(self, sd):
        """The reads of ``sd``'s fields into the object at the current depth."""
        em, V = self.em, self.V
        o, fv = self._o(), self._f()
        fields = sd.fields
        i = 0
        while i < len(fields):
            f = fields[i]
            c_reg = cond(f.regular, V)
            run, j = fixed_run(fields, i, c_reg, V)
            if run:
                fmt = ">" + "".join(FIXED[x.base][0] for x in run)
                size = sum(FIXED[x.base][1] for x in run)
                self._open(c_reg)
                em("%s = %r" % (fv, run[0].attr))
                targets = ", ".join(o + "." + x.attr for x in run)
                folded = self._next_length_code(fields, j) if c_reg == "True" else None
                if folded:
                    # the next field's length (or the tagged-field count) in the same unpack
                    fmt += folded
                    size += FOLDED_SIZE[folded]
                    targets += ", n"
                    self.len_read = True
                elif len(run) == 1:
                    targets += ","
                em("%s = %s(buf, pos)" % (targets, em.struct(fmt) + "u"))
                em("pos += %d" % size)
                self._close(c_reg)
                if c_reg != "True":
                    em("else:")
                    em.ind += 1
                    for x in run:
                        self._read_default(x, o + "." + x.attr)
                    em.ind -= 1
                i = j
                continue
            if c_reg == "False":
                self._read_default(f, o + "." + f.attr)
            else:
                self._open(c_reg)
                em("%s = %r" % (fv, f.attr))
                self._narrowed(f.regular, self.read_value, f, o + "." + f.attr)
                self._close(c_reg)
                if c_reg != "True":
                    em("else:")
                    em.ind += 1
                    self._read_default(f, o + "." + f.attr)
                    em.ind -= 1
            i += 1
        if self.flex:
            tagged = sorted([f for f in fields if cond(f.tagged, V) != "False"], key=lambda f: f.tag)
            em("%s = '<tagged fields>'" % fv)
            if self.len_read:
                self.len_read = False  # the count's first byte: read by the last run's unpack
            else:
                em("n = buf[pos]")
                em("pos += 1")
            em("if n:")
            em.ind += 1
            em("%s.unknown_tagged_fields = u = {}" % o)
            em("if n >= 128:")
            em("    n, pos = _ruv(buf, pos - 1)")
            em("for _ in range(n):")
            em.ind += 1
            em("tag, size, pos = _rtag(buf, pos)")
            em("end = pos + size")
            kw = "if"
            for f in tagged:
                c = cond(f.tagged, V)
                em("%s tag == %d%s:" % (kw, f.tag, "" if c == "True" else " and (%s)" % c))
                em.ind += 1
                em("%s = %r" % (fv, f.attr))
                # (not inline: a nested struct's own tag loop would reuse u, tag, size, end)
                saved, self.calls_nested = self.calls_nested, True
                self._narrowed(f.tagged, self.read_value, f, o + "." + f.attr)
                self.calls_nested = saved
                em("if pos != end:")
                em("    raise _tag_size(%d, size, pos - end + size)" % f.tag)
                em.ind -= 1
                kw = "elif"
            if tagged:
                em("else:")
                em.ind += 1
            em("u[tag] = buf[pos:end].tobytes()")
            em("pos = end")
            if tagged:
                em.ind -= 1
            em.ind -= 2
            # none (the common case): the shared empty mapping, no dict per decoded struct
            em("else:")
            em("    %s.unknown_tagged_fields = _NO_TAGS" % o)
        else:
            em("%s.unknown_tagged_fields = _NO_TAGS" % o)
        assert not self.len_read, (self.msg.name, sd.name)

    def _inline(self, sd):
        """Read a nested struct of ``sd`` inline into ``o<d+1>`` (the caller stores it)."""
        em = self.em
        self.d += 1
        self.max_d = max(self.max_d, self.d)
        assert self.d < 16, (self.msg.name, sd.name, "recursive struct?")
        em("%s = _new(%s)" % (self._o(), sd.alias))
        self._read_struct(sd)
        self.d -= 1

    def _next_length_code(self, fields, j):
        """The ``struct`` code of what the reader reads right after a fixed-width run ending
        before ``fields[j]`` when it is a length or the tagged-field count that the run's
        unpack can read too (``B``: a compact length's or the count's first byte, ``h``/``i``:
        a classic length), else ``None``. Fields absent from the variant read nothing."""
        V = self.V
        while j < len(fields) and cond(fields[j].regular, V) == "False":
            j += 1
        if j == len(fields):
            return "B" if self.flex else None
        g = fields[j]
        if cond(g.regular, V) != "True" or not (g.is_array or g.type in VARIABLE):
            return None
        if g.is_array and not g.struct and g.elem not in FIXED and g.elem != "string":
            return None
        fflex = field_flexible(g, self.msg, intersect(V, g.regular), self.flex)
        if fflex == "True":
            return "B"
        if fflex == "False":
            return "h" if g.type == "string" else "i"
        return None

    def _read_len(self, f, fflex, classic_code):
        """Emit code leaving the length (or -1 for null) in n; when ``len_read`` is set the
        preceding run's unpack has read its first byte (compact) or all of it (classic)."""
        em = self.em
        if self.len_read:
            self.len_read = False
            if fflex == "True":
                self._compact_len_rest()
            return
        if fflex == "True":
            em("n = buf[pos]")
            em("pos += 1")
            self._compact_len_rest()
        elif fflex == "False":
            if classic_code == "h":
                em("n, = _ui16(buf, pos)")
                em("pos += 2")
            else:
                em("n, = _ui32(buf, pos)")
                em("pos += 4")
        else:
            em("if %s:" % fflex)
            em.ind += 1
            self._read_len(f, "True", classic_code)
            em.ind -= 1
            em("else:")
            em.ind += 1
            self._read_len(f, "False", classic_code)
            em.ind -= 1

    def _compact_len_rest(self):
        """The rest of a compact length whose first byte is in n (pos after it)."""
        em = self.em
        em("if n >= 128:")
        # two-byte lengths (128 B to 16 KiB: record sets, long strings) without a call
        em("    if buf[pos] < 128:")
        em("        n = (n & 127) | (buf[pos] << 7)")
        em("        pos += 1")
        em("    else:")
        em("        n, pos = _ruv(buf, pos - 1)")
        em("n -= 1")

    def _null_read(self, f, target):
        """Emit: if n == -1 (null) handle; leaves an open else block? No: emits full if/elif."""
        em = self.em
        cn = cond(f.nullable, self.V)
        if cn == "True":
            em("if n == -1:")
            em("    %s = None" % target)
        elif cn == "False":
            em("if n == -1:")
            em("    raise _DecodeFailure('null value for non-nullable field', [])")
        else:
            em("if n == -1:")
            em("    if not (%s):" % cn)
            em("        raise _DecodeFailure('null value for non-nullable field', [])")
            em("    %s = None" % target)

    def read_value(self, f, target):
        em = self.em
        V = self.V
        fflex = field_flexible(f, self.msg, V, self.flex)
        if f.is_array:
            self._read_len(f, fflex, "i")
            self._null_read(f, target)
            em("else:")
            em.ind += 1
            ix, lst = self._ix(), self._lst()
            em("%s = -1" % ix)
            if f.struct or f.elem in ("string", "uuid"):
                minsize = 16 if f.elem == "uuid" else 1
                if f.struct and not self.flex and not self._has_mandatory_bytes(f.struct):
                    em("if n < 0:")
                else:
                    em("if %s:" % self._too_long(fflex, minsize))
                em("    raise _bad_len(n, lb - pos)")
                em("%s = []" % lst)
                inline = f.struct and not self.calls_nested
                if inline:
                    em("%s = ''" % self._f(self.d + 1))
                em("for %s in _RANGES[n] if n < %d else range(n):" % (ix, CACHED_RANGES))
                em.ind += 1
                if inline:
                    self._inline(f.struct)
                    em("%s.append(o%d)" % (lst, self.d + 1))
                elif f.struct:
                    em("e, pos = %s._r%s(buf, pos, v)" % (f.struct.alias, self.suffix))
                elif f.elem == "uuid":
                    em("e = buf[pos:pos + 16].tobytes()")
                    em("pos += 16")
                else:
                    self._read_len(f, fflex, "h")
                    em("if n < 0 or n > lb - pos:")
                    em("    raise _bad_len(n, lb - pos)")
                    em("e = buf[pos:pos + n].tobytes().decode()")
                    em("pos += n")
                if not inline:
                    em("%s.append(e)" % lst)
                em.ind -= 1
                if inline:
                    em("%s = None" % self._f(self.d + 1))
                em("%s = -1" % ix)
                em("%s = %s" % (target, lst))
            else:
                code, size = FIXED[f.elem]
                em("if %s:" % self._too_long(fflex, size))
                em("    raise _bad_len(n * %d, lb - pos)" % size)
                em("%s = list(_unpack_from('>%%d%s' %% n, buf, pos))" % (target, code))
                em("pos += n * %d" % size)
            em.ind -= 1
        elif f.struct:
            cn = cond(f.nullable, V)
            if cn == "False" and not self.calls_nested:
                em("%s = ''" % self._f(self.d + 1))
                self._inline(f.struct)
                em("%s = None" % self._f(self.d + 1))
                em("%s = o%d" % (target, self.d + 1))
            elif cn == "False":
                em("%s, pos = %s._r%s(buf, pos, v)" % (target, f.struct.alias, self.suffix))
            else:
                em("n, = _ui8(buf, pos)")
                em("pos += 1")
                em("if n < 0:")
                if cn != "True":
                    em("    if not (%s):" % cn)
                    em("        raise _DecodeFailure('null value for non-nullable field', [])")
                em("    %s = None" % target)
                em("else:")
                em("    %s, pos = %s._r%s(buf, pos, v)" % (target, f.struct.alias, self.suffix))
        elif f.type in FIXED:
            code, size = FIXED[f.type]
            em("%s, = %s(buf, pos)" % (target, em.struct(">" + code) + "u"))
            em("pos += %d" % size)
        elif f.type in VARIABLE:
            self._read_len(f, fflex, "h" if f.type == "string" else "i")
            self._null_read(f, target)
            em("else:")
            em.ind += 1
            em("if %s:" % ("n > lb - pos" if fflex == "True" else "n < -1 or n > lb - pos"))
            em("    raise _bad_len(n, lb - pos)")
            # (the view's tobytes() and bytes.decode() (UTF-8, strict): ~600 instructions fewer
            # per value than bytes(view) and str(view, 'utf-8'), whose arguments are parsed
            # by the generic keyword parser)
            if f.type == "string":
                # (an empty string, as an unset rack or client id, without the slice's view,
                # bytes and str: ~1.3k instructions)
                em("%s = buf[pos:pos + n].tobytes().decode() if n else ''" % target)
            elif f.type == "records" or f.zero_copy:
                em("%s = buf[pos:pos + n]" % target)
            else:
                em("%s = buf[pos:pos + n].tobytes()" % target)
            em("pos += n")
            em.ind -= 1
        else:
            raise AssertionError(f.type)

    @staticmethod
    def _too_long(fflex, size):
        """The test of an array length n, read past its null branch, that is negative or
        longer than the bytes left: a compact length is then >= 0 (an unsigned varint
        minus one, -1 being null), so only a classic one is tested for a negative value."""
        fits = "n > lb - pos" if size == 1 else "n * %d > lb - pos" % size
        return fits if fflex == "True" else "n < 0 or " + fits

    def _has_mandatory_bytes(self, sd):
        for f in sd.fields:
            if covers(f.regular, self.V):
                return True
        return False


def variants(msg):
    """[(flex, V)] for the message's valid range."""
    out = []
    valid = msg.valid
    fl = msg.flexible
    if fl is None:
        out.append((False, valid))
    else:
        nonflex = intersect(valid, (0, fl[0] - 1)) if fl[0] > 0 else None
        if nonflex:
            out.append((False, nonflex))
        flex = intersect(valid, fl)
        if flex:
            out.append((True, flex))
    return out


# ---------------------------------------------------------------------------
# row writers: the hot responses without message objects

#: Messages that also get row writers (``<Message>.Rows``): the responses the broker builds per
#: request on its hot paths, encoded from plain tuples by one straight-line function per version.
ROW_MESSAGES = ("ProduceResponse", "FetchResponse")


def _has(r, v):
    return r is not None and r[0] <= v <= r[1]


def row_default_src(f):
    """Python source of a field's default in row form: arrays ``()``, structs ``None``."""
    if f.is_array:
        return "None" if f.raw_default == "null" else "()"
    if f.struct:
        return "None"
    return f.default_src()


def row_is_default_src(f, expr):
    """Source of a boolean: the row-form value ``expr`` equals the field's default (a struct
    given as ``None`` is its default; arrays compare by length, as ``== []`` does for lists)."""
    if f.is_array:
        if f.raw_default == "null":
            return "%s is None" % expr
        return "(%s is not None and not %s)" % (expr, expr)
    if f.struct:
        assert f.default_src() != "None", (f.name, "a nullable struct defaulting to null has no row form")
        terms = [row_is_default_src(sub, "%s[%d]" % (expr, i)) for i, sub in enumerate(f.struct.fields)]
        return "(%s is None or (%s))" % (expr, " and ".join(terms))
    return f.is_default_src(expr)


class RowGen:
    """Emit the row writer of one message at one exact version: every struct is a tuple of
    its schema fields in schema order (all versions' fields; ``unknown_tagged_fields`` are
    not part of a row), arrays are sequences of rows, a struct field may be ``None`` for its
    default. Every version check is resolved here, nested arrays are inline loops that unpack
    their rows, fixed-width runs are one ``struct`` pack. Same bytes and parts as the message
    objects' ``encode``, and the same errors for null or absent values."""

    def __init__(self, em, msg, v):
        self.em, self.msg, self.v = em, msg, v
        self.flex = msg.flexible is not None and _has(msg.flexible, v)
        self.depth = 0

    def fflex(self, f):
        if not self.flex:
            return False
        if f.flex_override == "inherit":
            return True
        return _has(f.flex_override, self.v)

    def names(self, sd):
        self.depth += 1
        return ["%s_%d" % (f.attr.rstrip("_"), self.depth) for f in sd.fields]

    def gen(self, name):
        em, msg = self.em, self.msg
        names = self.names(msg.root)
        em("def %s(v, %s):" % (name, ", ".join(names)))
        em.ind += 1
        em("buf = []")
        em("parts = []")
        self.write_struct(msg.root, names, "buf", "parts")
        em("if buf or not parts:")
        em("    parts.append(_join(buf))")
        em("return parts")
        em.ind -= 1
        em("")

    def write_struct(self, sd, names, buf, parts):
        em, v = self.em, self.v
        fields = sd.fields
        qual = "%s.%s" % (self.msg.name, sd.name) if sd.parent is not None else sd.name
        k, tail_bytes = self.default_tail(fields)
        tail_test = None
        if k is not None:
            # the struct's end (variable fields after its last fixed run, absent fields, the
            # tagged fields) all at their defaults, the common case: one test, constant bytes
            terms = [row_is_default_src(f, n) for f, n in zip(fields[k:], names[k:])
                     if not (_has(f.regular, v) or _has(f.tagged, v)) and not f.ignorable]
            terms += [row_is_default_src(f, n) for f, n in zip(fields[k:], names[k:]) if _has(f.regular, v)]
            terms += [row_is_default_src(f, n) for f, n in zip(fields, names) if _has(f.tagged, v)]
            tail_test = " and ".join(terms) or "True"
        i = 0
        while i < len(fields):
            f = fields[i]
            if _has(f.regular, v):
                j = self.fixed_end(fields, i)
                if j > i:
                    fmt = ">" + "".join(FIXED[x.base][0] for x in fields[i:j])
                    args = ", ".join(names[i:j])
                    # fields[k - 1] is fixed-width and fields[k:] hold none at this version:
                    # the run holding it ends at k, and the tail's constant bytes join its pack
                    if j == k:
                        em("if %s:" % tail_test)
                        em("    %s.append(%sp(%s, %r))" % (buf, em.struct(fmt + "%ds" % len(tail_bytes)), args,
                                                           tail_bytes))
                        em("else:")
                        em.ind += 1
                        em("%s.append(%sp(%s))" % (buf, em.struct(fmt), args))
                        self.write_tail(sd, names, k, buf, parts, qual)
                        em.ind -= 1
                        return
                    folded = self.folded_run(fields, j, k)
                    if folded:
                        self.write_folded(fields, names, fmt, args, *folded, buf, parts, qual)
                        i = folded[1]
                        continue
                    em("%s.append(%sp(%s))" % (buf, em.struct(fmt), args))
                    i = j
                    continue
                self.write_value(f, names[i], buf, parts, qual)
            elif not _has(f.versions, v) and not f.ignorable:
                em("if not (%s):" % row_is_default_src(f, names[i]))
                em("    raise _absent_field(%r, %r, v)" % (qual, f.attr))
            i += 1
        assert k is None, (qual, "a default tail is written with the fixed run before it")
        self.write_tail(sd, names, len(fields), buf, parts, qual)

    def fixed_end(self, fields, j):
        """The end of the fixed-width run of regular fields starting at ``j``."""
        while (j < len(fields) and _has(fields[j].regular, self.v) and fields[j].base in FIXED
               and not fields[j].is_array):
            j += 1
        return j

    def folded_run(self, fields, j, k):
        """``(j', m)`` when ``fields[j']``, the next field written in place after a fixed run
        ending at ``j``, is an array of structs whose empty or null encoding is one byte and
        ``fields[j' + 1:m]`` another fixed run (not the one a default tail joins): an empty
        array is then written with both runs in one pack (FetchResponse's partition: no
        aborted transactions between its offsets and the preferred read replica, one pack
        and one bytearray concatenation instead of three); else ``None``."""
        v = self.v
        if j == k or not self.flex:
            return None
        # (fields written elsewhere or not at all in between: tagged ones, ignorable absent ones)
        while j < len(fields) and not _has(fields[j].regular, v) and (
                _has(fields[j].tagged, v) or (not _has(fields[j].versions, v) and fields[j].ignorable)):
            j += 1
        if j >= len(fields):
            return None
        f = fields[j]
        if not (_has(f.regular, v) and f.is_array and f.struct and self.fflex(f)):
            return None
        m = self.fixed_end(fields, j + 1)
        if m == j + 1 or m == k:
            return None
        return j, m

    def write_folded(self, fields, names, fmt1, args1, j, m, buf, parts, qual):
        """The fixed run just ahead (its struct format ``fmt1`` and arguments ``args1``) and
        ``fields[j + 1:m]`` around the array ``fields[j]``: one pack with its one-byte length
        when it is empty or null, else each as it is."""
        em = self.em
        f = fields[j]
        fmt2 = ">" + "".join(FIXED[x.base][0] for x in fields[j + 1:m])
        args2 = ", ".join(names[j + 1:m])
        em("x = %s" % names[j])
        em("if not x:")
        em.ind += 1
        if _has(f.nullable, self.v):
            count = "0 if x is None else 1"
        else:
            em("if x is None:")
            em("    raise _null_field(%r, %r, v)" % (qual, f.attr))
            count = "1"
        em("%s.append(%sp(%s, %s, %s))" % (buf, em.struct(fmt1 + "B" + fmt2[1:]), args1, count, args2))
        em.ind -= 1
        em("else:")
        em.ind += 1
        em("%s.append(%sp(%s))" % (buf, em.struct(fmt1), args1))
        self.write_items(f, buf, parts)
        em("%s.append(%sp(%s))" % (buf, em.struct(fmt2), args2))
        em.ind -= 1

    def default_tail(self, fields):
        """``(k, bytes)``: ``fields[k:]`` hold no fixed-width, struct or records field present
        at this version, ``fields[k - 1]`` is fixed-width, and the encoding of every field from
        ``k`` and every tagged field at its default is ``bytes``; else ``(None, None)``."""
        v = self.v
        k = len(fields)
        while k > 0:
            f = fields[k - 1]
            if _has(f.regular, v):
                if (f.struct and not f.is_array) or f.type == "records" or (f.base in FIXED and not f.is_array):
                    break
                if f.raw_default == "null" and not _has(f.nullable, v):
                    break
            k -= 1
        if k == 0 or fields[k - 1].base not in FIXED or fields[k - 1].is_array:
            return None, None  # only worth a test when the bytes join a fixed run's pack
        out = b""
        for f in fields[k:]:
            if not _has(f.regular, v):
                continue
            fflex = self.fflex(f)
            if f.raw_default == "null":
                out += b"\x00" if fflex else (b"\xff\xff" if f.type == "string" else b"\xff\xff\xff\xff")
            elif f.is_array or f.type == "bytes":
                out += b"\x01" if fflex else b"\x00\x00\x00\x00"
            else:  # a string: the default's bytes
                d = (f.raw_default or "").encode("utf-8")
                if fflex:
                    if len(d) + 1 >= 128:
                        return None, None
                    out += bytes([len(d) + 1]) + d
                else:
                    out += len(d).to_bytes(2, "big") + d
        if self.flex:
            out += b"\x00"
        if not out:
            return None, None
        return k, out

    def write_tail(self, sd, names, k, buf, parts, qual):
        """The fields from ``k`` on and the tagged fields, each written as it is."""
        em, v = self.em, self.v
        fields = sd.fields
        for i in range(k, len(fields)):
            f = fields[i]
            if _has(f.regular, v):
                self.write_value(f, names[i], buf, parts, qual)
            elif not _has(f.versions, v) and not f.ignorable:
                em("if not (%s):" % row_is_default_src(f, names[i]))
                em("    raise _absent_field(%r, %r, v)" % (qual, f.attr))
        if not self.flex:
            return
        tagged = sorted([(f, n) for f, n in zip(fields, names) if _has(f.tagged, v)], key=lambda p: p[0].tag)
        if not tagged:
            em("%s.append(%r)" % (buf, b"\x00"))
            return
        em("if %s:" % " and ".join(row_is_default_src(f, n) for f, n in tagged))
        em("    %s.append(%r)" % (buf, b"\x00"))
        em("else:")
        em.ind += 1
        tags, t = "tags_%d" % self.depth, "t_%d" % self.depth
        em("%s = []" % tags)
        for f, n in tagged:
            em("if not (%s):" % row_is_default_src(f, n))
            em.ind += 1
            em("%s = []" % t)
            self.write_value(f, n, t, "None", qual)
            em("%s.append((%d, _join(%s)))" % (tags, f.tag, t))
            em.ind -= 1
        em("tb = bytearray()")
        em("_write_tags(tb, %s, None)" % tags)
        em("%s.append(tb)" % buf)
        em.ind -= 1

    def len_prefix(self, fflex, buf, nexpr, classic):
        em = self.em
        if fflex:
            em("n = %s + 1" % nexpr)
            em("if n < 128:")
            em("    %s.append(_BYTES[n])" % buf)
            em("else:")
            em("    %s.append(_wuv(n))" % buf)
        else:
            em("%s.append(%s(%s))" % (buf, "_pi16" if classic == "h" else "_pi32", nexpr))

    def null(self, f, buf, qual, fflex, classic):
        """The body of ``if x is None``: the null encoding, or the error of a non-nullable field."""
        if _has(f.nullable, self.v):
            self.em("%s.append(%r)" % (buf, b"\x00" if fflex else classic))
        else:
            self.em("raise _null_field(%r, %r, v)" % (qual, f.attr))

    def write_value(self, f, expr, buf, parts, qual):
        em = self.em
        fflex = self.fflex(f)
        if f.struct and not f.is_array:
            sub = self.names(f.struct)
            em("if %s is None:" % expr)
            em("    %s = (%s,)" % (expr, ", ".join(row_default_src(x) for x in f.struct.fields)))
            em("%s = %s" % (", ".join(sub) + ("," if len(sub) == 1 else ""), expr))
            self.write_struct(f.struct, sub, buf, parts)
            self.depth -= 1
            return
        em("x = %s" % expr)
        if f.is_array:
            # a non-empty array is the common case: one truth test; then null, then empty
            em("if not x:")
            em.ind += 1
            em("if x is None:")
            em.ind += 1
            self.null(f, buf, qual, fflex, b"\xff\xff\xff\xff")
            em.ind -= 1
            em("else:")
            em("    %s.append(%r)" % (buf, b"\x01" if fflex else b"\x00\x00\x00\x00"))
            em.ind -= 1
            em("else:")
            em.ind += 1
            self.write_items(f, buf, parts)
            em.ind -= 1
        elif f.type in FIXED:
            em("%s.append(%sp(x))" % (buf, em.struct(">" + FIXED[f.type][0])))
        elif f.type in ("string", "bytes"):
            em("if x is None:")
            em.ind += 1
            self.null(f, buf, qual, fflex, b"\xff\xff" if f.type == "string" else b"\xff\xff\xff\xff")
            em.ind -= 1
            em("else:")
            em.ind += 1
            if f.type == "string":
                em("x = x.encode()")
            self.len_prefix(fflex, buf, "len(x)", "h" if f.type == "string" else "i")
            em("%s.append(x)" % buf)
            em.ind -= 1
        elif f.type == "records":
            assert parts != "None", (self.msg.name, f.name, "records in a tagged field")
            em("if x is None:")
            em.ind += 1
            self.null(f, buf, qual, fflex, b"\xff\xff\xff\xff")
            em.ind -= 1
            em("elif type(x) is _FileRegion:")
            em.ind += 1
            self.len_prefix(fflex, buf, "x.count", "i")
            em("parts.append(_join(%s))" % buf)
            em("del %s[:]" % buf)
            em("parts.append(x)")
            em.ind -= 1
            em("else:")
            em.ind += 1
            self.len_prefix(fflex, buf, "_records_size(x)", "i")
            # (small bytes-like records as a chunk; a list or large ones as emit_records
            # writes them, from a bytearray of the chunks so far: the same parts as the
            # message's encode)
            em("if type(x) is not list and len(x) < _LARGE_PART:")
            em("    %s.append(x)" % buf)
            em("else:")
            em.ind += 1
            em("tb = bytearray(_join(%s))" % buf)
            em("del %s[:]" % buf)
            em("_emit_records(tb, %s, x)" % parts)
            em("if tb:")
            em("    %s.append(tb)" % buf)
            em.ind -= 1
            em.ind -= 1
        else:
            raise AssertionError(f.type)

    def write_items(self, f, buf, parts):
        """The length and the elements of the non-empty array in ``x``."""
        em = self.em
        fflex = self.fflex(f)
        self.len_prefix(fflex, buf, "len(x)", "i")
        if f.struct:
            sub = self.names(f.struct)
            em("for %s in x:" % (", ".join(sub) + ("," if len(sub) == 1 else "")))
            em.ind += 1
            self.write_struct(f.struct, sub, buf, parts)
            em.ind -= 1
            self.depth -= 1
        elif f.elem == "uuid":
            em("for e in x:")
            em("    %s.append(e)" % buf)
        elif f.elem in FIXED:
            em("%s.append(_pack('>%%d%s' %% len(x), *x))" % (buf, FIXED[f.elem][0]))
        elif f.elem == "string":
            em("for e in x:")
            em.ind += 1
            em("e = e.encode()")
            self.len_prefix(fflex, buf, "len(e)", "h")
            em("%s.append(e)" % buf)
            em.ind -= 1
        else:
            raise AssertionError(f.type)


def gen_class(em, msg, sd, qual):
    em("class %s(_Struct):" % sd.name)
    em.ind += 1
    attrs = [f.attr for f in sd.fields]
    assert len(set(attrs)) == len(attrs), (msg.name, sd.name)
    em("__slots__ = %r" % (tuple(attrs + ["unknown_tagged_fields"]),))
    em("_FIELDS = __slots__")
    em("API_KEY = %r" % msg.api_key)
    em("API_NAME = %r" % msg.api_name)
    em("VALID_VERSIONS = %r" % (msg.valid,))
    em("FLEXIBLE_VERSIONS_START = %r" % (msg.flexible[0] if msg.flexible else None))
    em("")
    params = []
    body = []
    for f in sd.fields:
        if f.mutable_default():
            params.append("%s=_MISSING" % f.attr)
            body.append("self.%s = %s if %s is _MISSING else %s" % (f.attr, f.default_src(), f.attr, f.attr))
        else:
            params.append("%s=%s" % (f.attr, f.default_src()))
            body.append("self.%s = %s" % (f.attr, f.attr))
    params.append("unknown_tagged_fields=None")
    body.append("self.unknown_tagged_fields = {} if unknown_tagged_fields is None else unknown_tagged_fields")
    em("def __init__(self, %s):" % ", ".join(params))
    for b in body:
        em("    " + b)
    em("")
    em("def _is_default(self):")
    terms = [f.is_default_src("self." + f.attr) for f in sd.fields] + ["not self.unknown_tagged_fields"]
    em("    return (%s)" % "\n            and ".join(terms))
    em("")
    for flex, V in variants(msg):
        g = StructGen(em, msg, sd, flex, V)
        g.gen_writer()
        g.gen_reader()
    if sd.parent is None:
        for child in msg.order:
            gen_class(em, msg, child, qual + "." + child.name)
    em.ind -= 1
    em("")


#: What generated code may use from the hand-written runtime: (module, ((name, alias or None), ...)).
#: A generated module imports the names its code uses (the records module: all of them).
RUNTIME_IMPORTS = (
    ("kafkatw.protocol._runtime", (
        ("BYTES", "_BYTES"),
        ("CATCH", "_CATCH"),
        ("MISSING", "_MISSING"),
        ("NO_TAGS", "_NO_TAGS"),
        ("RANGES", "_RANGES"),
        ("Struct", "_Struct"),
        ("absent", "_absent"),
        ("absent_field", "_absent_field"),
        ("bad_len", "_bad_len"),
        ("new", "_new"),
        ("not_nullable", "_not_nullable"),
        ("null_field", "_null_field"),
        ("pack", "_pack"),
        ("pi16", "_pi16"),
        ("pi32", "_pi32"),
        ("join", "_join"),
        ("tag_size", "_tag_size"),
        ("ui8", "_ui8"),
        ("ui16", "_ui16"),
        ("ui32", "_ui32"),
        ("unpack_from", "_unpack_from"),
    )),
    ("kafkatw.protocol.codec", (
        ("DecodeFailure", "_DecodeFailure"),
        ("LARGE_PART", "_LARGE_PART"),
        ("ProtocolDecodeError", None),
        ("UnsupportedVersionError", None),
        ("ZERO_UUID", "_ZERO_UUID"),
        ("emit_records", "_emit_records"),
        ("fail", "_fail"),
        ("fail_in", "_fail_in"),
        ("read_tag_header", "_rtag"),
        ("read_uvarint", "_ruv"),
        ("records_size", "_records_size"),
        ("write_tags", "_write_tags"),
        ("write_uvarint", "_wuv"),
    )),
    ("kafkatw.protocol.parts", (
        ("FileRegion", "_FileRegion"),
    )),
)


def import_block(used=None, structs=True):
    """``import struct`` (with ``structs``) and the runtime imports; with ``used`` (source
    text) only the names it uses."""
    out = ["import struct as _struct", ""] if structs else []
    for module, names in RUNTIME_IMPORTS:
        names = [(n, a) for n, a in names if used is None or re.search(r"\b%s\b" % (a or n), used)]
        specs = ["%s as %s" % (n, a) if a else n for n, a in names]
        if len(specs) == 1:
            out.append("from %s import %s" % (module, specs[0]))
        elif specs:
            out.append("from %s import (" % module)
            out.extend("    %s," % s for s in specs)
            out.append(")")
    return "\n".join(out)


RECORDS_DOC = '''"""Coordinator record schemas (generated by tools/gen_protocol.py --records from Kafka's
coordinator-records JSON; do not edit). The key and value of a record in ``__consumer_offsets``
or ``__transaction_state`` are an int16 version followed by the class encoded at that version.
"""'''

SUBMODULE_DOC = '''"""%s.

Generated by tools/gen_protocol.py from Kafka's JSON schemas; do not edit. Loaded on first use
by ``kafkatw.protocol.messages``.
"""'''


def load_messages(schema_dir):
    return [Message(load_json(path)) for path in sorted(glob.glob(os.path.join(schema_dir, "*.json")))]


def emit_messages(body, msgs):
    """The classes of ``msgs``, their nested-struct aliases and their SCHEMA descriptions."""
    for m in msgs:
        gen_class(body, m, m.root, m.name)
    for m in msgs:
        for sd in m.order:
            body("%s = %s.%s" % (sd.alias, m.name, sd.name))
            if sd.parent is not None and sd.parent is not m.root:
                body("%s.%s = %s" % (sd.parent.alias, sd.name, sd.alias))
    body("")
    body("")
    for m in msgs:
        if m.name in ROW_MESSAGES:
            emit_rows(body, m)
    body("# Field descriptions: (attr, type, versions, nullableVersions, taggedVersions, tag,")
    body("# ignorable, flexibleVersions override or 'inherit', struct class); version ranges are")
    body("# (lo, hi) with hi=%d for 'N+', None for 'none'." % INF)
    for m in msgs:
        for sd in [m.root] + m.order:
            body("%s.SCHEMA = (" % sd.alias)
            for f in sd.fields:
                body("    %s," % f.schema_tuple())
            body(")")


def emit_rows(body, m):
    """``<Message>.Rows`` of a message in ``ROW_MESSAGES``: its row writer per version (versions
    that generate the same code share one function), converters to the message objects, and
    the class a handler answers with."""
    lo, hi = m.valid
    seen = {}  # source -> function name
    table = []
    for v in range(lo, hi + 1):
        tmp = Emitter()
        tmp.structs = body.structs  # one packer table per module
        RowGen(tmp, m, v).gen("_W_")
        text = "\n".join(tmp.lines)
        name = seen.get(text)
        if name is None:
            name = seen[text] = "_rows_%s_v%d" % (m.name, v)
            body.lines.extend(text.replace("def _W_(", "def %s(" % name, 1).split("\n"))
            body("")
        table.append(name)
    body("_ROWS_%s = (%s,)" % (m.name, ", ".join(table)))
    body("")
    body("")
    for sd in [m.root] + m.order:
        names = [f.attr for f in sd.fields]
        body("def _obj_%s(row):" % sd.alias)
        body("    %s = row" % (", ".join(names) + ("," if len(names) == 1 else "")))
        args = []
        for f in sd.fields:
            a = f.attr
            if f.is_array and f.struct:
                val = "None if %s is None else [_obj_%s(e) for e in %s]" % (a, f.struct.alias, a)
            elif f.is_array:
                val = "None if %s is None else list(%s)" % (a, a)
            elif f.struct:
                val = "%s() if %s is None else _obj_%s(%s)" % (f.struct.alias, a, f.struct.alias, a)
            else:
                val = a
            args.append("%s=%s" % (a, val))
        body("    return %s(%s)" % (sd.alias, ", ".join(args)))
        body("")
        body("")
    root = m.root.fields
    attrs = [f.attr for f in root]
    body("class _%sRows:" % m.name)
    body('    """A %s given as rows, what a handler answers with on a hot path: each struct' % m.name)
    body("    a tuple of its schema fields in schema order, arrays sequences of those, ``None`` for a")
    body("    struct field's default. ``encode`` writes the bytes and parts ``%s.encode``" % m.name)
    body('    would, without building the objects; ``to_message()`` builds them."""')
    body("")
    body("    __slots__ = %r" % (tuple(attrs),))
    body("    MESSAGE = %s" % m.name)
    body("    VALID_VERSIONS = %r" % (m.valid,))
    body("")
    body("    def __init__(self, %s):" % ", ".join("%s=%s" % (f.attr, row_default_src(f)) for f in root))
    for a in attrs:
        body("        self.%s = %s" % (a, a))
    body("")
    body("    def encode(self, version):")
    body("        if not %d <= version <= %d:" % (lo, hi))
    body("            raise UnsupportedVersionError('%s: version %%d not in %d-%d' %% version)" % (m.name, lo, hi))
    body("        return _ROWS_%s[version%s](version, %s)" % (m.name, " - %d" % lo if lo else "",
                                                          ", ".join("self." + a for a in attrs)))
    body("")
    body("    encode_bytes = _Struct.encode_bytes")
    body("")
    body("    def to_message(self):")
    body("        return _obj_%s((%s,))" % (m.name, ", ".join("self." + a for a in attrs)))
    body("")
    body("    def __repr__(self):")
    body("        return '%s.Rows(%s)' %% (%s,)" % (m.name, ", ".join("%s=%%r" % a for a in attrs),
                                              ", ".join("self." + a for a in attrs)))
    body("")
    body("")
    body("%s.Rows = _%sRows" % (m.name, m.name))
    body("")
    body("")


def struct_table(em):
    out = []
    for fmt, name in sorted(em.structs.items(), key=lambda kv: int(kv[1][2:])):
        out.append("%su = _struct.Struct(%r).unpack_from" % (name, fmt))
        out.append("%sp = _struct.Struct(%r).pack" % (name, fmt))
    return out


def generate_records(schema_dir):
    """The coordinator records module: one file, every class loaded with it."""
    msgs = load_messages(schema_dir)
    body = Emitter()
    emit_messages(body, msgs)
    body("")
    body("")
    body("ALL_RECORDS = (%s,)" % ", ".join(m.name for m in msgs))
    out = [RECORDS_DOC, "", import_block(), "",
           '__all__ = ["ProtocolDecodeError", "UnsupportedVersionError", "ALL_RECORDS"]', "", "", ""]
    out.extend(struct_table(body))
    out += ["", ""]
    out.extend(body.lines)
    return "\n".join(out).rstrip() + "\n"


def module_name(msg):
    """The submodule of a message: its API's (request and response together) or its own."""
    return snake(msg.api_name) if msg.api_name else snake(msg.name)


def generate_package(schema_dir):
    """``{file name: source}`` of the messages package: ``__init__.py`` (registries, lazy
    loading) and one module per API or standalone schema."""
    msgs = load_messages(schema_dir)
    groups = {}
    for m in msgs:
        groups.setdefault(module_name(m), []).append(m)
    files = {}
    for name, group in sorted(groups.items()):
        assert name != "__init__" and not keyword.iskeyword(name), name
        body = Emitter()
        emit_messages(body, group)
        api = group[0].api_name
        what = ("Kafka's %s API (key %d): %s" % (api, group[0].api_key, ", ".join(m.name for m in group))
                if api else "Kafka's %s schema" % group[0].name)
        text = "\n".join(body.lines)
        out = [SUBMODULE_DOC % what, "", import_block(text, bool(body.structs)), "",
               "__all__ = [%s]" % ", ".join('"%s"' % m.name for m in group), "", ""]
        out.extend(struct_table(body))
        out += ["", ""]
        out.extend(body.lines)
        files[name + ".py"] = "\n".join(out).rstrip() + "\n"
    files["__init__.py"] = generate_init(msgs)
    return files


def _table(items):
    return "\n".join("    %r: %r," % kv for kv in items)


def generate_init(msgs):
    requests = [m for m in msgs if m.kind == "request"]
    responses = [m for m in msgs if m.kind == "response"]
    flex = lambda m: m.flexible[0] if m.flexible else None
    return INIT_TEMPLATE % {
        "modules": _table((m.name, module_name(m)) for m in msgs),
        "api_names": _table((m.api_key, m.api_name) for m in requests),
        "request_names": _table((m.api_key, m.name) for m in requests),
        "response_names": _table((m.api_key, m.name) for m in responses),
        "request_flexible": _table((m.api_key, flex(m)) for m in requests),
        "response_flexible": _table((m.api_key, flex(m)) for m in responses),
    }


INIT_TEMPLATE = '''"""Kafka protocol messages (generated by tools/gen_protocol.py from the JSON schemas; do not edit).

One class per schema with nested struct classes; ``encode(version) -> parts``,
``decode(buf, version)``, ``decode_from(buf, pos, version)``. Primitives live in ``codec``.

The classes of each API (its request and response) live in their own submodule, loaded on first
use: ``messages.ProduceRequest`` or ``from kafkatw.protocol.messages import ProduceRequest``
imports ``messages.produce`` (PEP 562 ``__getattr__``) and keeps its classes in this package's
globals, so every later lookup is a plain attribute hit. A broker never loads the classes of
APIs it doesn't serve. ``REQUESTS``/``RESPONSES`` load per api key; ``all_messages()`` loads all.
"""

from collections.abc import Mapping as _Mapping
from importlib import import_module as _import_module

from kafkatw.protocol.codec import ProtocolDecodeError, UnsupportedVersionError

__all__ = ["ProtocolDecodeError", "UnsupportedVersionError", "REQUESTS", "RESPONSES", "API_NAMES",
           "request_header_version", "response_header_version", "all_messages"]

#: message class name -> the submodule that defines it
_MODULES = {
%(modules)s
}
API_NAMES = {
%(api_names)s
}
_REQUEST_NAMES = {
%(request_names)s
}
_RESPONSE_NAMES = {
%(response_names)s
}
#: api key -> first flexible version of its request / response (None: never flexible)
_REQUEST_FLEXIBLE = {
%(request_flexible)s
}
_RESPONSE_FLEXIBLE = {
%(response_flexible)s
}


def __getattr__(name):
    """A message class not loaded yet: import its submodule (PEP 562)."""
    module = _MODULES.get(name)
    if module is None:
        if name == "ALL_MESSAGES":
            return all_messages()
        raise AttributeError("module %%r has no attribute %%r" %% (__name__, name))
    return _load(module)[name]


def __dir__():
    return sorted(set(globals()) | set(_MODULES) | {"ALL_MESSAGES"})


def _load(module):
    """Import a submodule and keep its classes as globals here; returns the globals."""
    mod = _import_module(__name__ + "." + module)
    g = globals()
    for name in mod.__all__:
        g[name] = getattr(mod, name)
    return g


def all_messages():
    """Every message class in schema-file order, all submodules loaded (also ``ALL_MESSAGES``)."""
    g = globals()
    for module in sorted(set(_MODULES.values())):
        _load(module)
    everything = g["ALL_MESSAGES"] = tuple(g[name] for name in _MODULES)
    return everything


class _Registry(_Mapping):
    """api key -> request (or response) class, each loaded on its key's first lookup."""

    def __init__(self, names):
        self._names = names
        self._classes = {}

    def __getitem__(self, api_key):
        cls = self._classes.get(api_key)
        if cls is None:
            name = self._names[api_key]
            cls = self._classes[api_key] = globals().get(name) or __getattr__(name)
        return cls

    def __contains__(self, api_key):
        return api_key in self._names

    def __iter__(self):
        return iter(self._names)

    def __len__(self):
        return len(self._names)

    def __repr__(self):
        return "<lazy registry of %%d message classes>" %% len(self._names)


REQUESTS = _Registry(_REQUEST_NAMES)
RESPONSES = _Registry(_RESPONSE_NAMES)


def request_header_version(api_key, version):
    """RequestHeader version for a request: 2 if flexible else 1 (ControlledShutdown v0: 0)."""
    if api_key == 7 and version == 0:
        return 0
    fv = _REQUEST_FLEXIBLE[api_key]
    return 2 if fv is not None and version >= fv else 1


def response_header_version(api_key, version):
    """ResponseHeader version for a response: 1 if flexible else 0 (ApiVersions: always 0)."""
    if api_key == 18:
        return 0
    fv = _RESPONSE_FLEXIBLE[api_key]
    return 1 if fv is not None and version >= fv else 0
'''


def write_package(files, out_dir):
    """Write the package; generated modules no longer produced are removed (the folder is ours)."""
    os.makedirs(out_dir, exist_ok=True)
    for name in os.listdir(out_dir):
        if name.endswith(".py") and name not in files:
            os.unlink(os.path.join(out_dir, name))
    for name, src in sorted(files.items()):
        path = os.path.join(out_dir, name)
        try:
            with open(path, encoding="utf-8") as f:
                if f.read() == src:
                    continue
        except OSError:
            pass
        with open(path, "w", encoding="utf-8") as f:
            f.write(src)


def main(argv):
    records = len(argv) > 1 and argv[1] == "--records"
    if records:
        argv = argv[:1] + argv[2:]
    if len(argv) != 3:
        sys.stderr.write(__doc__)
        return 2
    if records:
        with open(argv[2], "w", encoding="utf-8") as f:
            f.write(generate_records(argv[1]))
    else:
        write_package(generate_package(argv[1]), argv[2])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
