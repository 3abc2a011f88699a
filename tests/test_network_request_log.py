"""The request log line: Kafka's fields and its time arithmetic, on a Clock."""

import json
import os
import tempfile

from twisted.trial import unittest

from kafkatw.network.request import Response
from kafkatw.network.request_log import RequestLogger, _api_key_name

from tests.test_network_support import Harness, ScriptedHandler, api_versions_frame


class RequestLogTests(unittest.SynchronousTestCase):
    def test_api_key_names(self):
        self.assertEqual([_api_key_name(n) for n in ("ApiVersions", "Fetch", "DescribeAcls", "OffsetForLeaderEpoch",
                                                     "AlterPartitionReassignments")],
                         ["API_VERSIONS", "FETCH", "DESCRIBE_ACLS", "OFFSET_FOR_LEADER_EPOCH",
                          "ALTER_PARTITION_REASSIGNMENTS"])

    def test_line_fields_and_times(self):
        fd, path = tempfile.mkstemp()
        os.close(fd)
        self.addCleanup(os.unlink, path)
        handler = ScriptedHandler(hold={5}, responder=lambda r: Response(
            ScriptedHandler().respond(r).body, summary={"errorCode": 0}, throttle_time_ms=0))
        h = Harness(handler, request_logger=RequestLogger(path=path))
        proto, tr = h.connect()
        proto.dataReceived(api_versions_frame(5, client_id="cid", software=("librdkafka", "2.6.0")))
        h.clock.advance(0.250)  # waiting "remotely"
        handler.release(5)
        h.clock.advance(0.004)  # writing
        h.layer.drain()
        h.server.request_logger.close()
        with open(path) as f:
            lines = f.read().splitlines()
        self.assertEqual(len(lines), 1)
        self.assertTrue(lines[0].startswith("Completed request:{"))
        e = json.loads(lines[0][len("Completed request:"):])
        self.assertEqual(e, {
            "isForwarded": False,
            "requestHeader": {"requestApiKey": 18, "requestApiVersion": 3, "correlationId": 5,
                              "clientId": "cid", "requestApiKeyName": "API_VERSIONS"},
            "request": {"size": len(api_versions_frame(5, client_id="cid", software=("librdkafka", "2.6.0"))) - 4},
            "response": {"errorCode": 0},
            "connection": "127.0.0.1:9092-127.0.0.1:50000-0-0",
            "totalTimeMs": 254.0, "requestQueueTimeMs": 0.0, "localTimeMs": 250.0, "remoteTimeMs": 0.0,
            "throttleTimeMs": 0, "responseQueueTimeMs": 0.0, "sendTimeMs": 4.0, "pipelineWaitMs": 0.0,
            "securityProtocol": "PLAINTEXT", "principal": "User:ANONYMOUS", "listener": "PLAINTEXT",
            "clientInformation": {"softwareName": "librdkafka", "softwareVersion": "2.6.0"},
        })
        self.assertEqual(h.server.metrics.requests_total["ApiVersions"], 1)
        self.assertEqual(h.server.metrics.request_time_ms_total["ApiVersions"], 254.0)

    def test_parked_request_counts_remote_time(self):
        fd, path = tempfile.mkstemp()
        os.close(fd)
        self.addCleanup(os.unlink, path)

        class Parking(ScriptedHandler):
            def handle(self, request):
                d = ScriptedHandler.handle(self, request)
                h.clock.advance(0.002)  # local work
                request.mark_api_local_complete()
                return d

        handler = Parking(hold={1})
        h = Harness(handler, request_logger=RequestLogger(path=path), auto_drain=True)
        proto, tr = h.connect()
        proto.dataReceived(api_versions_frame(1))
        h.clock.advance(0.5)
        handler.release(1)
        h.server.request_logger.close()
        with open(path) as f:
            e = json.loads(f.read().split(":", 1)[1])
        self.assertEqual((e["localTimeMs"], e["remoteTimeMs"], e["totalTimeMs"]), (2.0, 500.0, 502.0))

    def test_pipelined_request_logs_its_wait_behind_the_one_before(self):
        """Three requests read at once and one read later: each waits (pipelineWaitMs) from
        its read until the request before it on the connection is answered."""
        fd, path = tempfile.mkstemp()
        os.close(fd)
        self.addCleanup(os.unlink, path)
        handler = ScriptedHandler(hold={1, 2})
        h = Harness(handler, request_logger=RequestLogger(path=path), auto_drain=True)
        proto, tr = h.connect()
        proto.dataReceived(api_versions_frame(1) + api_versions_frame(2) + api_versions_frame(3))
        h.clock.advance(0.100)
        proto.dataReceived(api_versions_frame(4))  # read 100 ms after the first three
        h.clock.advance(0.200)
        handler.release(1)  # 2 is taken up, 300 ms after it was read
        h.clock.advance(0.050)
        handler.release(2)  # 3 (read at 0) and 4 (read at 100 ms) are answered at once
        h.server.request_logger.close()
        with open(path) as f:
            entries = [json.loads(line.split(":", 1)[1]) for line in f]
        self.assertEqual([(e["requestHeader"]["correlationId"], e["pipelineWaitMs"], e["totalTimeMs"])
                          for e in entries],
                         [(1, 0.0, 300.0), (2, 300.0, 50.0), (3, 350.0, 0.0), (4, 250.0, 0.0)])

    def test_disabled_writes_nothing(self):
        logger = RequestLogger(enabled=False)
        h = Harness(ScriptedHandler(), request_logger=logger, auto_drain=True)
        proto, tr = h.connect()
        proto.dataReceived(api_versions_frame(1))
        self.assertEqual(logger.entries_written, 0)

    def test_from_config(self):
        class Cfg:
            request_log_enabled = True
            request_log_file = None

        logger = RequestLogger.from_config(Cfg())
        self.assertTrue(logger.enabled)
        self.assertIsNone(logger._file)
        Cfg.request_log_enabled = False
        self.assertFalse(RequestLogger.from_config(Cfg()).enabled)
