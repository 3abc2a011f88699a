#!/usr/bin/env bash
# Builds librdkafka 2.0.2's own test runner (tests/test-runner) from Debian's source package,
# unmodified, for tests/test_librdkafka_suite.py. The build is cached outside the git tree:
# a second run with the runner in place does nothing. Needs root for apt-get (as CI has).
#
#   tests/librdkafka/build.sh            # into $KAFKATW_LIBRDKAFKA_DIR (default below)
#
# Default cache: ${XDG_CACHE_HOME:-$HOME/.cache}/kafkatw/librdkafka-2.0.2 (the test module
# looks in the same place); the runner ends up in $DIR/src/tests/test-runner.
set -euo pipefail

VERSION=2.0.2
DEB_VERSION=2.0.2-1
home=${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}  # as Python's expanduser("~")
DIR=${KAFKATW_LIBRDKAFKA_DIR:-${XDG_CACHE_HOME:-$home/.cache}/kafkatw/librdkafka-$VERSION}
RUNNER=$DIR/src/tests/test-runner

if [ -x "$RUNNER" ] && [ -f "$DIR/.built" ]; then
  echo "librdkafka $VERSION test-runner: $RUNNER (cached)"
  exit 0
fi

export DEBIAN_FRONTEND=noninteractive
apt_updated=
apt_update() {
  [ -n "$apt_updated" ] || { apt-get update -qq; apt_updated=1; }
}

# `apt-get source` needs a deb-src entry; derive one from the deb822 sources the image has
if ! apt-cache showsrc librdkafka 2>/dev/null | grep -qx "Version: $DEB_VERSION"; then
  src=/etc/apt/sources.list.d/kafkatw-deb-src.sources
  if [ ! -f "$src" ]; then
    if [ ! -f /etc/apt/sources.list.d/debian.sources ]; then
      echo "error: no /etc/apt/sources.list.d/debian.sources to derive a deb-src entry from" >&2
      exit 1
    fi
    sed 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources > "$src"
  fi
  apt_update
fi

# what ./configure below and the tests need: compilers, dpkg-source (unpacks the package) and
# the libraries of the enabled features (no curl, no GSSAPI)
need=()
for pkg in build-essential dpkg-dev pkg-config python3 zlib1g-dev libssl-dev libzstd-dev liblz4-dev; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  apt_update
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

start=$(date +%s)
work=$(mktemp -d "$(dirname "$DIR")/.librdkafka-build.XXXXXX" 2>/dev/null || { mkdir -p "$(dirname "$DIR")"; mktemp -d "$(dirname "$DIR")/.librdkafka-build.XXXXXX"; })
trap 'rm -rf "$work"' EXIT
cd "$work"
apt-get source -qq "librdkafka=$DEB_VERSION" >/dev/null 2>&1 || apt-get source "librdkafka=$DEB_VERSION"
mv "librdkafka-$VERSION" src
cd src
# -O0: the library's speed does not matter here, its build time does (2 cores). The logs go one
# folder up: mklove takes any configure.* file beside ./configure for one of its modules
./configure --no-download --disable-curl --disable-gssapi --disable-optimization \
  --disable-debug-symbols >../configure.out 2>&1 || { tail -30 ../configure.out >&2; exit 1; }
nice make -j2 libs >../make.out 2>&1 || { tail -30 ../make.out >&2; exit 1; }
nice make -j2 -C tests build >>../make.out 2>&1 || { tail -30 ../make.out >&2; exit 1; }
touch "$work/.built"
rm -rf "$DIR"
mv "$work" "$DIR"
trap - EXIT
echo "librdkafka $VERSION test-runner built in $(( $(date +%s) - start )) s: $DIR/src/tests/test-runner"
