"""incidents and nodes: grouping across nodes, episodes, jobs hit, repeat offenders (table-driven)."""
from __future__ import annotations

from datetime import timedelta

import polars as pl
from typer.testing import CliRunner

from observe.cli import app
from queries.incidents import incidents
from queries.nodes import rank_gpus, rank_nodes
from tests.test_explain import ev, frame

DAY = 86400


def cluster_day() -> pl.DataFrame:
    rows = [
        # a leaf switch: 5 nodes lose their link within 30 s (one incident, shared cause), a job on 3 of them
        *[ev("ib_link_down", f"gpu00{i}", 100 + 6 * i) for i in range(1, 6)],
        ev("slurm_job_start", "ctl1", -600, "slurm", job_id="42", attrs={"nodes": "gpu[003-005,009]"}),
        ev("slurm_job_end", "ctl1", 400, "slurm", job_id="42", attrs={"state": "FAILED"}),
        # slurmctld repeats "not responding" every 100 s: one episode, one incident
        *[ev("slurm_node_not_responding", "gpu008", 5000 + 100 * k, "slurm") for k in range(3)],
        # application Xid: the job's fault, not an incident; an OOM kill: an incident, not a node fault
        ev("gpu_xid", "gpu007", 9000, code=13, attrs={"category": "application"}),
        ev("oom_kill", "gpu007", 9500),
        # one GPU falls off the bus on two days: RMA
        ev("gpu_xid", "gpu006", 20000, code=79, gpu="0000:3b:00", attrs={"category": "gpu"}),
        ev("gpu_xid", "gpu006", 20000 + DAY, code=79, gpu="0000:3b:00", attrs={"category": "gpu"}),
    ]
    for i, row in enumerate(rows):
        row["offset"] = i
    return frame(rows)


def test_incidents_group_across_nodes_and_repeats() -> None:
    found = incidents(cluster_day().lazy())
    rows = found.select("category", "nodes", "events", "jobs", "shared_cause").to_dicts()
    assert rows == [
        {"category": "network", "nodes": 5, "events": 5, "jobs": ["42"], "shared_cause": True},
        {"category": "node", "nodes": 1, "events": 3, "jobs": [], "shared_cause": False},
        {"category": "memory", "nodes": 1, "events": 1, "jobs": [], "shared_cause": False},  # the OOM kill
        {"category": "gpu", "nodes": 1, "events": 1, "jobs": [], "shared_cause": False},
        {"category": "gpu", "nodes": 1, "events": 1, "jobs": [], "shared_cause": False},
    ]
    assert found.get_column("nodelist")[0] == "gpu[001-005]"


def test_nodes_and_gpus_ranked_with_advice() -> None:
    events = cluster_day().lazy()
    nodes = rank_nodes(events)
    assert nodes.row(0, named=True)["node"] == "gpu006"
    assert nodes.row(0, named=True)["repeat"] and nodes.row(0, named=True)["advice"] == "drain"
    assert "gpu007" not in nodes.get_column("node").to_list()  # app Xid and OOM are the job's own
    gpus = rank_gpus(events)
    assert gpus.select("node", "gpu", "episodes", "xids", "advice").row(0) == ("gpu006", "0000:3b:00", 2, "79", "rma")


def test_cli_incidents_and_nodes(store) -> None:
    store.write(cluster_day())
    runner = CliRunner()
    since = (ev("x", at=-DAY)["ts"] - timedelta(days=1)).isoformat()
    out = runner.invoke(app, ["incidents", "--store", str(store.root), "--since", since, "--until", "2100-01-01"])
    assert out.exit_code == 0, out.output
    assert out.output.splitlines()[1].split()[3:6] == ["network", "5", "gpu[001-005]"]
    nodes = runner.invoke(app, ["nodes", "--gpus", "--store", str(store.root), "--since", since,
                                "--until", "2100-01-01", "--format", "json"])
    assert nodes.exit_code == 0 and '"advice": "rma"' in nodes.output.splitlines()[0]


def test_untrusted_lines_are_evidence_never_a_drain_an_rma_or_a_page() -> None:
    """The same cluster day, every line arriving by a route users write (a job's output, the journal
    from a user's account, a syslog file): the incidents and the flaky nodes show, unconfirmed, and call
    for verify, never drain or RMA; what pages (trusted_only, the exporter's) sees no incident."""
    trusted = cluster_day().lazy()
    for route in ("job_output", "journal_user", "user_file", "syslog_file"):
        forged = cluster_day().with_columns(pl.lit(route).alias("route")).lazy()
        found = incidents(forged)
        assert found.height == incidents(trusted).height and found.get_column("unconfirmed").all()
        assert incidents(forged, trusted_only=True).height == 0
        nodes, gpus = rank_nodes(forged), rank_gpus(forged)
        assert nodes.filter(pl.col("episodes") > 0).height and (nodes.get_column("unconfirmed") == nodes.get_column("episodes")).all()
        assert not set(nodes.get_column("advice")) & {"drain"} and not set(gpus.get_column("advice")) & {"rma"}
        assert "verify" in set(nodes.get_column("advice")) | set(gpus.get_column("advice")), (nodes, gpus)
    assert "drain" in set(rank_nodes(trusted).get_column("advice"))


def test_host_names_a_hostlist_cannot_hold_are_listed_as_they_are() -> None:
    """A log's host field may carry brackets or commas: listed plainly, not an internal error."""
    rows = [ev("ib_link_down", host, 100 + i) for i, host in enumerate(["gpu[1]x", "a,b", "gpu002"])]
    for i, row in enumerate(rows):
        row["offset"] = i
    found = incidents(frame(rows).lazy())
    assert found.get_column("nodelist")[0] == "a,b,gpu002,gpu[1]x"


def test_forged_lines_neither_merge_nor_stretch_a_trusted_episode() -> None:
    """The kernel's own log holds gpu001's Xid 79 three times, hours apart (three episodes: drain); a user's
    syslog lines forge the same Xid every ten minutes between them, and one the day before. The trusted
    episodes stay three, on the day they came, and the advice stays drain; the forged ones are apart."""
    xid = {"category": "gpu", "action": "drain_node"}
    real = [ev("gpu_xid", "gpu001", h * 3600, code=79, gpu="0000:3b:00", attrs=xid, route="system_file") for h in (8, 9, 10)]
    forged = [ev("gpu_xid", "gpu001", 8 * 3600 + 300 + m * 600, code=79, gpu="0000:3b:00", attrs=xid, route="syslog_file")
              for m in range(12)] + [ev("gpu_xid", "gpu001", -3600, code=79, gpu="0000:3b:00", attrs=xid, route="syslog_file")]
    rows = real + forged
    for i, row in enumerate(rows):
        row["offset"] = i
    node = rank_nodes(frame(rows).lazy()).row(0, named=True)
    assert node["advice"] == "drain" and node["episodes"] - node["unconfirmed"] == 3, node
    found = incidents(frame(rows).lazy())
    assert found.filter(~pl.col("unconfirmed")).height == 3, found
