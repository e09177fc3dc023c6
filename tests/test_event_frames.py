"""An event's server-sent-events frame is made once, whatever the number of streams sending it."""

from __future__ import annotations

from sokovan.bus.user_events import UserEvent, parse_wire, wire_many


def test_the_frame_is_the_event_as_one_message_and_is_made_once() -> None:
    event = UserEvent(name="session.status", session_id="s", to_status="PENDING", owner="u")
    frame = event.sse_frame()
    assert frame == f"event: session.status\ndata: {event.wire()}\n\n".encode()
    assert '"from":null' in frame.decode()
    assert event.sse_frame() is frame  # cached: a second stream pays nothing


def test_events_read_back_from_the_wire_make_their_frames_afresh() -> None:
    events = [UserEvent(name="kernel.status", kernel_id=str(n), to_status="RUNNING") for n in range(3)]
    back = parse_wire(wire_many(events))
    assert [e.sse_frame() for e in back] == [e.sse_frame() for e in events]
