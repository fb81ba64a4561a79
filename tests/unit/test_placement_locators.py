"""A new queue's worker (broker/workers/placement.py): which locator applies, from the
declare arguments, the policy and the configuration, in RabbitMQ 3.10.8's order, and what
each one chooses."""

from __future__ import annotations

import pytest

from broker import policies
from broker.workers.placement import CLIENT_LOCAL, LEAST_QUEUES, RANDOM, Placement, locator


@pytest.mark.parametrize(("args", "policy", "config", "expected"), [
    ({}, {}, "", LEAST_QUEUES),  # nothing said: this broker's default
    ({"x-queue-master-locator": "client-local"}, {}, "", CLIENT_LOCAL),
    ({"x-queue-master-locator": "min-masters"}, {}, "client-local", LEAST_QUEUES),
    ({"x-queue-master-locator": "random"}, {}, "", RANDOM),
    # the argument wins over the policy, the policy over the configuration
    ({"x-queue-master-locator": "client-local"}, {"queue-master-locator": "random"}, "",
     CLIENT_LOCAL),
    ({}, {"queue-master-locator": "client-local"}, "random", CLIENT_LOCAL),
    ({}, {}, "client-local", CLIENT_LOCAL),
    # an unknown name is passed over, not refused (get_location_mod_by_args -> by_policy)
    ({"x-queue-master-locator": "nearest"}, {"queue-master-locator": "client-local"}, "",
     CLIENT_LOCAL),
    ({"x-queue-master-locator": 5}, {}, "client-local", CLIENT_LOCAL),
    ({}, {}, "bogus", LEAST_QUEUES),
    # a classic queue does not read the leader locator
    ({"x-queue-leader-locator": "client-local"}, {}, "", LEAST_QUEUES),
])
def test_a_classic_queue_reads_the_master_locator(args, policy, config, expected):
    assert locator("classic", args, policy, master_config=config) == expected


@pytest.mark.parametrize(("args", "policy", "config", "expected"), [
    ({}, {}, "", LEAST_QUEUES),
    ({"x-queue-leader-locator": "client-local"}, {}, "", CLIENT_LOCAL),
    ({"x-queue-leader-locator": "balanced"}, {}, "client-local", LEAST_QUEUES),
    # 3.10's older names are balanced too (rabbit_queue_location:leader_locator0/1)
    ({"x-queue-leader-locator": "random"}, {}, "", LEAST_QUEUES),
    ({"x-queue-leader-locator": "least-leaders"}, {}, "", LEAST_QUEUES),
    # the policy wins over the argument for a quorum queue (args_policy_lookup, policy's)
    ({"x-queue-leader-locator": "balanced"}, {"queue-leader-locator": "client-local"}, "",
     CLIENT_LOCAL),
    ({}, {}, "client-local", CLIENT_LOCAL),
    ({"x-queue-master-locator": "client-local"}, {}, "", LEAST_QUEUES),
])
def test_a_quorum_queue_reads_the_leader_locator(args, policy, config, expected):
    assert locator("quorum", args, policy, leader_config=config) == expected


def test_each_locator_chooses_its_worker():
    places = Placement()
    for i in range(3):  # worker 0 holds three queues, worker 1 one, worker 2 none
        places.choose(("/", f"q{i}"), 0, 0, {0, 1, 2})
    places.choose(("/", "q3"), 1, 0, {0, 1, 2})
    assert places.choose(("/", "local"), None, 0, {0, 1, 2}, CLIENT_LOCAL) == 0
    assert places.choose(("/", "least"), None, 0, {0, 1, 2}, LEAST_QUEUES) == 2
    # client-local from a worker that is not live: the least-loaded one (1 and 2 hold one
    # queue each: the lower index)
    assert places.choose(("/", "gone"), None, 3, {0, 1, 2}, CLIENT_LOCAL) == 1
    assert {places.choose(("/", f"r{i}"), None, 0, {0, 1, 2}, RANDOM)
            for i in range(200)} == {0, 1, 2}
    assert places.choose(("/", "fixed"), 1, 0, {0, 1, 2}, CLIENT_LOCAL) == 1


@pytest.mark.parametrize(("definition", "reason"), [
    ({"queue-master-locator": "nearest"},
     'Validation failed\n\n<<"nearest">> invalid queue-master-locator value\n'),
    ({"queue-leader-locator": "min-masters"},
     'Validation failed\n\n<<"min-masters">> is not a valid queue leader locator value\n'),
    ({"queue-leader-locator": 3},
     "Validation failed\n\n3 is not a valid queue leader locator value\n"),
])
def test_a_policy_with_an_unknown_locator_is_refused(definition, reason):
    with pytest.raises(ValueError) as err:
        policies.validate(".*", definition, 0, "all")
    assert str(err.value) == reason


def test_a_policy_with_known_locators_is_taken():
    for name in ("client-local", "min-masters", "random"):
        policies.validate(".*", {"queue-master-locator": name}, 0, "queues")
    for name in ("client-local", "balanced", "random", "least-leaders"):
        policies.validate(".*", {"queue-leader-locator": name}, 0, "queues")
