"""``kafkatw cluster describe``: the cluster id, the controller and every live broker (endpoint,
rack) from DescribeCluster (Metadata on older brokers); with ``--zookeeper`` also the controller
epoch and each broker's epoch read from ZooKeeper, as Kafka's ZooKeeper-era tools could."""

from kafkatw.cli.client import ClientError, check
from kafkatw.cli.helpers import print_table
from kafkatw.cli.output import wants_json, write_json
from kafkatw.protocol import messages

DESCRIBE_CLUSTER = 60


def add_parser(sub):
    p = sub.add_parser("cluster", help="describe the cluster: brokers, racks, controller, epochs")
    csub = p.add_subparsers(dest="action", metavar="ACTION")
    csub.required = True
    q = csub.add_parser("describe", help="cluster id, controller, brokers with endpoints and racks")
    q.add_argument("--zookeeper", metavar="HOST:PORT[/CHROOT]",
                   help="also read the controller epoch and the broker epochs from this ZooKeeper")
    q.set_defaults(func=cmd_describe)


def describe(client):
    """``(cluster id, controller id, [(broker id, host, port, rack)])`` from the bootstrap broker."""
    conn = client.any_connection()
    if DESCRIBE_CLUSTER in conn.api_versions:
        resp = client.call(messages.DescribeClusterRequest(include_cluster_authorized_operations=False), conn)
        check(resp.error_code, resp.error_message, "DescribeCluster")
        brokers = [(b.broker_id, b.host, b.port, b.rack) for b in resp.brokers]
        return resp.cluster_id, resp.controller_id, sorted(brokers)
    md = client.metadata([])
    return (md.cluster_id, md.controller_id,  # None and -1 where the version lacks them
            sorted((b.node_id, b.host, b.port, b.rack) for b in md.brokers))


def zookeeper_epochs(connect, timeout):
    """``(controller epoch, {broker id: broker epoch})`` from ZooKeeper: ``/controller_epoch``
    and the czxid of each ``/brokers/ids/<id>`` (what Kafka uses as the broker epoch)."""
    from kazoo.client import KazooClient
    from kazoo.exceptions import KazooException
    from kazoo.handlers.threading import KazooTimeoutError

    zk = KazooClient(hosts=connect, timeout=timeout, read_only=True)
    try:
        zk.start(timeout=timeout)
    except KazooTimeoutError:
        raise ClientError("cannot reach ZooKeeper at %s within %.0f s" % (connect, timeout)) from None
    try:
        try:
            epoch = int(zk.get("/controller_epoch")[0])
        except KazooException:
            epoch = None  # no controller elected yet
        epochs = {}
        for name in zk.get_children("/brokers/ids") if zk.exists("/brokers/ids") else []:
            try:
                epochs[int(name)] = zk.get("/brokers/ids/" + name)[1].czxid
            except (KazooException, ValueError):
                continue  # gone meanwhile, or not a broker's
        return epoch, epochs
    finally:
        zk.stop()
        zk.close()


def cmd_describe(client, args):
    cluster_id, controller, brokers = describe(client)
    controller_epoch, broker_epochs = None, {}
    if args.zookeeper:
        controller_epoch, broker_epochs = zookeeper_epochs(args.zookeeper, args.timeout)
    if wants_json(args):
        doc = {"clusterId": cluster_id, "controller": controller,
               "brokers": [{"id": b, "host": h, "port": p, "rack": r, "controller": b == controller}
                           for b, h, p, r in brokers]}
        if args.zookeeper:
            doc["controllerEpoch"] = controller_epoch
            for entry in doc["brokers"]:
                entry["brokerEpoch"] = broker_epochs.get(entry["id"])
        write_json(args.out, doc)
        return
    args.out.write("ClusterId: %s\tController: %s%s\n" % (
        cluster_id or "-", controller if controller is not None and controller >= 0 else "none",
        "\tControllerEpoch: %s" % (controller_epoch if controller_epoch is not None else "-")
        if args.zookeeper else ""))
    headers = ["BROKER", "HOST", "PORT", "RACK", "CONTROLLER"] + (["EPOCH"] if args.zookeeper else [])
    rows = [[b, h, p, r or "-", "yes" if b == controller else ""]
            + ([broker_epochs.get(b, "-")] if args.zookeeper else []) for b, h, p, r in brokers]
    print_table(headers, rows, args.out)
