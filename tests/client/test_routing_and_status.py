"""The client's pure decisions: routing by the table view, request splitting, and the safe verdict."""

from __future__ import annotations

from shardgrid.client.routing import TableView, group_by_owner, split_requests
from shardgrid.client.status import ClusterStatus
from shardgrid.core import messages as m
from shardgrid.core.limits import MAX_REQUEST_BYTES
from shardgrid.core.metadata.cluster_state import ClusterState


def _reply(first, versions, owners, more=False, count=4):
    addresses = tuple(sorted(set(owners)))
    rows = tuple((addresses.index(owner),) for owner in owners)
    return m.TableReply(
        partition_count=count,
        first_partition=first,
        addresses=addresses,
        versions=tuple(versions),
        replicas=rows,
        more=more,
    )


def test_table_pages_and_redirects_only_move_forward():
    view = TableView()
    assert view.apply_page(_reply(0, [1, 1], ["a:1", "b:1"], more=True)) == 2
    assert view.apply_page(_reply(2, [1, 1], ["a:1", "a:1"])) is None
    assert view.owners == ["a:1", "b:1", "a:1", "a:1"]
    view.apply_redirect(m.PartitionRedirect(1, 3, "c:1"))
    assert view.owners[1] == "c:1"
    view.apply_redirect(m.PartitionRedirect(1, 2, "b:1"))  # older than what the view holds
    assert view.owners[1] == "c:1"
    view.apply_page(_reply(0, [1, 2], ["a:1", "b:1"]))  # a stale page: partition 1 stays at version 3
    assert view.owners[1] == "c:1"
    view.forget(0)
    assert group_by_owner([0, 1, 2, 3], [0, 1, 2, 3], view) == {None: [0], "c:1": [1], "a:1": [2, 3]}


def test_the_view_keeps_every_replica_and_which_partitions_are_unavailable():
    view = TableView()
    reply = m.TableReply(
        partition_count=3,
        first_partition=0,
        addresses=("a:1", "b:1", "c:1"),
        versions=(1, 1, 1),
        replicas=((0, 1), (1, -1), (2, 0)),
        unavailable=(2,),
    )
    assert view.apply_page(reply) is None
    assert view.replicas == [("a:1", "b:1"), ("b:1",), ("c:1", "a:1")]
    assert view.unavailable == {2}
    assert view.owners[2] is None
    healed = m.TableReply(
        partition_count=3, first_partition=0, addresses=("a:1", "c:1"), versions=(1, 1, 2), replicas=((0,), (0,), (1,))
    )
    view.apply_page(healed)
    assert view.unavailable == set()
    assert view.replicas == [("a:1",), ("a:1",), ("c:1",)]


def test_requests_are_split_by_count_and_bytes():
    keys = [b"k"] * 5
    assert split_requests(range(5), keys, None, 2) == [[0, 1], [2, 3], [4]]
    big = [b"v" * (MAX_REQUEST_BYTES // 2)] * 3
    assert split_requests(range(3), [b"k"] * 3, big, 100) == [[0], [1], [2]]


def _status(address, leader="a:1", **fields):
    defaults = dict(
        lifecycle="active", lite=False, term=1, cluster_state=ClusterState.ACTIVE, applied_index=10,
        members=("a:1", "b:1"), lite_members=(), leaving_members=(), partition_count=271, table_stamp=7,
        owned_partitions=1, backup_replicas=1, missing_replicas=0, migrations_in_log=0, migrations_here=0,
        migrations_planned=0, migrations_finished=0, writes_awaiting_backups=0, syncs_in_flight=0,
        leader_idle=address == leader, quiet=True,
    )  # fmt: skip
    defaults.update(fields)
    return m.MemberStatus(call_id=1, address=address, uuid="uuid-" + address, leader_address=leader, **defaults)


def test_safe_needs_every_member_quiet_and_agreeing():
    members = ("a:1", "b:1")
    safe = ClusterStatus(members, {"a:1": _status("a:1"), "b:1": _status("b:1")})
    assert safe.safe
    assert safe.leader == "a:1"
    cases = {
        "did not answer": ClusterStatus(members, {"a:1": _status("a:1")}, {"b:1": "refused"}),
        "applied the whole log": ClusterStatus(
            members, {"a:1": _status("a:1"), "b:1": _status("b:1", applied_index=9)}
        ),
        "same partition table": ClusterStatus(members, {"a:1": _status("a:1"), "b:1": _status("b:1", table_stamp=8)}),
        "rebalancing": ClusterStatus(
            members, {"a:1": _status("a:1", leader_idle=False, migrations_planned=3), "b:1": _status("b:1")}
        ),
        "missing": ClusterStatus(members, {"a:1": _status("a:1", missing_replicas=2), "b:1": _status("b:1")}),
        "admitting, removing": ClusterStatus(
            members, {"a:1": _status("a:1", leader_idle=False), "b:1": _status("b:1")}
        ),
        "waits until it is active": ClusterStatus(
            members,
            {
                "a:1": _status("a:1", leader_idle=False, cluster_state=ClusterState.NO_MIGRATION),
                "b:1": _status("b:1", cluster_state=ClusterState.NO_MIGRATION),
            },
        ),
        "busy": ClusterStatus(members, {"a:1": _status("a:1"), "b:1": _status("b:1", quiet=False, syncs_in_flight=1)}),
        "agree on a leader": ClusterStatus(members, {"a:1": _status("a:1"), "b:1": _status("b:1", leader="b:1")}),
        "came back from its disks and waits for b:1": ClusterStatus(
            members, {"a:1": _status("a:1", awaited_members=("b:1",))}, {"b:1": "cannot connect"}
        ),
    }
    for expected, status in cases.items():
        assert expected in status.unsafe_reason, (expected, status.unsafe_reason)
        assert not status.safe
