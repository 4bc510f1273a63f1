"""explain: the verdict of ``observe explain`` on the job that just ended, as a check. It FAILs when the
verdict is a hardware fault on this node that the policy lets act (``[explain] acts_on``; a gpu_xid only
when ``[faults]`` gives its catalog action a remedy that takes the node out), sure enough
(``drain_above`` of ``queries/causes.toml``: the verdict's probability under explain's model, the one
threshold explain's own drain advice uses) and resting on lines a trusted route carried
(a user can write job output and their own journal entries, not the kernel's log). Where the trusted lines alone
name a fault that takes the node out (``node_fault``: as probable as the fault is real, whatever else failed the job),
that fault is the one weighed: what a user writes or makes their job do may add evidence, never hide a fault from
this check; and only a verdict whose advice for the node is a drain takes it out."""
from __future__ import annotations

from datetime import datetime

import polars as pl

from observe.health import faults
from observe.health.policy import from_doc
from observe.health.result import Result, Status, unknown
from observe.hostname import this_node
from observe.rules import catalog
from observe.store import Store
from queries.causes import load_causes
from queries.explain import ExplainError, explain

NAME = "explain"


def run(opts: dict) -> Result:
    """FAIL with the remedy the fault policy gives the verdict's fault; PASS when it names nothing to act on."""
    if not opts.get("job") or not opts.get("store"):
        return unknown(NAME, "needs a job and a store (the epilog passes both)")
    node, policy = opts.get("node") or this_node(), from_doc(opts["policy"])
    try:
        found = explain(Store(opts["store"]), str(opts["job"]), timeline_rows=0)
        root = found.node_fault or found.root_cause  # the fault trusted lines alone name, whatever users wrote beside
    except ExplainError as exc:
        return Result(NAME, Status.PASS, f"nothing to weigh: {exc}")
    if not root or root.get("node") != node or root.get("kind") not in opts["acts_on"]:
        return Result(NAME, Status.PASS, "the verdict names no fault of this node the policy acts on")
    action = root.get("xid_action") or _xid_action(root.get("code"))  # a Fatal NVLink5 line's is the fatal one
    remedy = policy.faults.xid_remedy.get(action) if root["kind"] == "gpu_xid" else None
    if root["kind"] == "gpu_xid" and remedy not in faults.ACTING:
        return Result(NAME, Status.PASS, f"gpu_xid {root.get('code')} on this node calls for no remedy that takes it out")
    sure = load_causes().scoring["drain_above"]
    if root.get("node_action") != "drain":  # a verify, a watch: explain itself takes the node out only on a drain
        return Result(NAME, Status.PASS, f"explain advises {root.get('node_action')} for this node, not a drain")
    if root.get("verdict") != "cause" or float(root.get("confidence") or 0) < sure:
        return Result(NAME, Status.PASS, f"undetermined, or less sure than {sure} (queries/causes.toml drain_above)")
    if not root.get("trusted"):
        return unknown(NAME, f"explain names {root['kind']} on this node from lines no trusted route carried: "
                             "not acted on")
    what = f"{root['kind']}{' ' + str(root['code']) if root.get('code') is not None else ''}"
    where = f" on {root['gpu']}" if root.get("gpu") else ""
    return Result(NAME, Status.FAIL, f"root cause of the failure: {what}{where} on this node "
                  f"(confidence {root['confidence']:.2f}): {str(root.get('message') or '')[:120]}",
                  {"root_cause": {k: str(v) if isinstance(v, datetime) else v for k, v in root.items()}},
                  action=faults.CHECK_ACTION.get(remedy))  # none for a kind without an Xid remedy: on_fail


def _xid_action(code) -> str | None:
    """The Xid catalog's action for ``code`` (drain_node, reset_gpu, ...)."""
    table = catalog("gpu_xid")
    if table is None or code is None:
        return None
    hit = table.filter(pl.col("code") == int(code))
    return hit["action"][0] if hit.height else None
