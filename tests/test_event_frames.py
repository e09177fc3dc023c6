"""An event's server-sent-events frame is made once, whatever the number of streams sending it; an
event read off the channel carries the JSON it arrived as, when that is one line."""

from __future__ import annotations

import json

from sokovan.bus.user_events import UserEvent, parse_wire, wire_many


def test_the_frame_is_the_event_as_one_message_and_is_made_once() -> None:
    event = UserEvent(name="session.status", session_id="s", to_status="PENDING", owner="u")
    frame = event.sse_frame()
    assert frame == f"event: session.status\ndata: {event.wire()}\n\n".encode()
    assert '"from":null' in frame.decode()
    assert event.sse_frame() is frame  # cached: a second stream pays nothing


def test_events_read_back_from_the_wire_frame_as_they_were_sent() -> None:
    events = [UserEvent(name="kernel.status", kernel_id=str(n), to_status="RUNNING") for n in range(3)]
    back = parse_wire(wire_many(events))
    assert [e.sse_frame() for e in back] == [e.sse_frame() for e in events]


def test_a_frame_carries_the_json_as_it_arrived() -> None:
    """A field the publisher wrote that this model does not know is in the frame as it was sent:
    the frame is the arrived JSON, not a second dump of what was parsed from it."""
    arrived = '{"from":null,"name":"session.status","session_id":"s","newer_field":1}'
    for message in (arrived, f"[{arrived},{arrived}]"):
        for event in parse_wire(message):
            assert event.sse_frame() == f"event: session.status\ndata: {arrived}\n\n".encode()


def test_json_over_several_lines_is_framed_on_one() -> None:
    events = [UserEvent(name="kernel.status", kernel_id=str(n), detail={"m": "a\nb"}) for n in range(3)]
    pretty = json.dumps(json.loads(wire_many(events)), indent=2)
    frames = [e.sse_frame() for e in parse_wire(pretty)]
    assert frames == [e.sse_frame() for e in events]
    assert all(f.count(b"\n") == 3 for f in frames)  # event, data, the blank line
