"""The fetcher's side of KIP-227 fetch sessions (server.fetch_session_handler): what each
request lists and forgets, and how answers and failures move the session id and epoch."""

from twisted.trial import unittest

from kafkatw.protocol import errors
from kafkatw.server.fetch_session import FetchMetadata
from kafkatw.server.fetch_session_handler import INITIAL, FetchSessionHandler, SessionPartition

TID = bytes(range(1, 17))
OTHER_TID = bytes(range(2, 18))
A, B, C = ("t", 0), ("t", 1), ("t", 2)


def part(offset, topic_id=TID, log_start=0, epoch=3, last_epoch=3):
    return SessionPartition(topic_id=topic_id, fetch_offset=offset, log_start_offset=log_start,
                            max_bytes=1048576, current_leader_epoch=epoch,
                            last_fetched_epoch=last_epoch)


class FetchSessionHandlerTests(unittest.TestCase):
    def open_session(self, handler, partitions, session_id=77):
        data = handler.build(partitions)
        self.assertTrue(data.is_full)
        self.assertTrue(handler.handle_response(errors.NONE, session_id, list(partitions)))
        return data

    def test_full_then_incremental_lists_only_changes(self):
        h = FetchSessionHandler(1)
        data = h.build({A: part(0), B: part(5)})
        self.assertEqual(data.metadata, INITIAL)
        self.assertEqual(data.to_send, [(A, part(0)), (B, part(5))])
        self.assertEqual(data.to_forget, [])
        self.assertTrue(h.handle_response(errors.NONE, 77, [A, B]))
        self.assertEqual(h.next_metadata, FetchMetadata(77, 1))
        # A moved on: only A is listed; B stays in the leader's session unlisted
        data = h.build({A: part(10), B: part(5)})
        self.assertEqual(data.metadata, FetchMetadata(77, 1))
        self.assertFalse(data.is_full)
        self.assertEqual(data.to_send, [(A, part(10))])
        self.assertEqual(data.to_forget, [])
        self.assertEqual(data.session, {A: part(10), B: part(5)})
        self.assertTrue(h.handle_response(errors.NONE, 77, [A]))
        # nothing changed: an empty incremental request, the epoch still moves
        data = h.build({A: part(10), B: part(5)})
        self.assertEqual((data.metadata, data.to_send, data.to_forget),
                         (FetchMetadata(77, 2), [], []))
        self.assertTrue(h.handle_response(errors.NONE, 77, []))
        self.assertEqual(h.next_metadata, FetchMetadata(77, 3))

    def test_every_field_counts_as_a_change(self):
        h = FetchSessionHandler(1)
        self.open_session(h, {A: part(0)})
        for changed in (part(0, log_start=1), part(0, epoch=4), part(0, last_epoch=4)):
            data = h.build({A: changed})
            self.assertEqual(data.to_send, [(A, changed)])
            self.assertTrue(h.handle_response(errors.NONE, 77, []))

    def test_added_removed_and_new_topic_id(self):
        h = FetchSessionHandler(1)
        self.open_session(h, {A: part(0), B: part(0)})
        data = h.build({A: part(0), C: part(7)})  # B backs off, C is new
        self.assertEqual(data.to_send, [(C, part(7))])
        self.assertEqual(data.to_forget, [(B, part(0))])
        self.assertTrue(h.handle_response(errors.NONE, 77, [C]))
        # the topic was recreated: the old id is forgotten, the new one added
        data = h.build({A: part(0, topic_id=OTHER_TID), C: part(7)})
        self.assertEqual(data.to_send, [(A, part(0, topic_id=OTHER_TID))])
        self.assertEqual(data.to_forget, [(A, part(0))])

    def test_leader_without_sessions_means_full_requests(self):
        h = FetchSessionHandler(1)
        for _ in range(3):
            data = h.build({A: part(0)})
            self.assertEqual((data.metadata, data.to_send), (INITIAL, [(A, part(0))]))
            self.assertTrue(h.handle_response(errors.NONE, 0, [A]))

    def test_session_not_found_starts_a_new_one(self):
        h = FetchSessionHandler(1)
        self.open_session(h, {A: part(0)})
        h.build({A: part(0)})
        self.assertFalse(h.handle_response(errors.FETCH_SESSION_ID_NOT_FOUND, 0, []))
        self.assertEqual(h.next_metadata, INITIAL)
        data = h.build({A: part(0)})
        self.assertEqual((data.metadata, data.to_send), (INITIAL, [(A, part(0))]))

    def test_wrong_epoch_or_failure_closes_the_session_with_a_full_request(self):
        h = FetchSessionHandler(1)
        self.open_session(h, {A: part(0), B: part(0)})
        h.build({A: part(0), B: part(0)})
        self.assertFalse(h.handle_response(errors.INVALID_FETCH_SESSION_EPOCH, 77, []))
        self.assertEqual(h.next_metadata, FetchMetadata(77, 0))
        data = h.build({A: part(3), B: part(0)})
        self.assertTrue(data.is_full)
        self.assertEqual(data.to_send, [(A, part(3)), (B, part(0))])
        self.assertTrue(h.handle_response(errors.NONE, 78, [A]))
        self.assertEqual(h.next_metadata, FetchMetadata(78, 1))
        h.build({A: part(3), B: part(0)})
        h.handle_error()  # a lost connection: unknown what the leader applied
        self.assertEqual(h.next_metadata, FetchMetadata(78, 0))

    def test_answer_naming_an_unasked_partition_is_refused(self):
        h = FetchSessionHandler(1)
        h.build({A: part(0)})
        self.assertFalse(h.handle_response(errors.NONE, 77, [A, C]))
        self.assertEqual(h.next_metadata, INITIAL)
        self.open_session(h, {A: part(0)})
        h.build({A: part(0)})
        self.assertFalse(h.handle_response(errors.NONE, 77, [C]))
        self.assertEqual(h.next_metadata, FetchMetadata(77, 0))

    def test_leader_closing_the_session(self):
        h = FetchSessionHandler(1)
        self.open_session(h, {A: part(0)})
        h.build({A: part(0)})
        self.assertTrue(h.handle_response(errors.NONE, 0, [A]))
        self.assertEqual(h.next_metadata, INITIAL)
