"""An Event's message is cut to the 1,024 characters the events API keeps (NoteLengthLimit in Kubernetes'
core validation), and no shorter: the end of a long reason (the device, the quota) is kept as far as fits."""

from driver.plugin.events import claim_event, node_event


def test_a_long_message_keeps_exactly_the_first_1024_characters():
    message = "".join(f"{k:05d} " for k in range(1000))  # 6,000 characters, each position distinct
    for body in (claim_event("n1", "ns", "c", "u1", "PrepareFailed", message),
                 node_event("n1", "StrategyFallback", message)):
        assert body["message"] == message[:1024]


def test_a_message_within_the_limit_is_kept_whole():
    message = "x" * 1024
    assert claim_event("n1", "ns", "c", "u1", "PrepareFailed", message)["message"] == message
