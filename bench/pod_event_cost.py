"""Seconds of event loop per pod event: a serving pod whose last run ended with a 4 KiB
termination message of "-a" repeated (the adversarial input), delivered as the watch delivers
a flapping pod's events (each a new resourceVersion, the same runs), through
Reconciler.pod_changed (what the kopf pod handler calls); and the same for a pod that only
carries our labels. Figures, not pass/fail:

    python -m bench.pod_event_cost [EVENTS]                                  # this tree
    PYTHONPATH=<other checkout>/operator python -m bench.pod_event_cost      # another
"""

from __future__ import annotations

import copy
import statistics
import sys
import time
from typing import Any

from tritonllm.api import constants as c
from tritonllm.api.settings import OperatorSettings
from tritonllm.handlers.cache import BY_NAME, Cache, project_deployment, project_workload
from tritonllm.handlers.reconciler import Reconciler

NS, DEP, DEP_UID, WL_UID, RS_UID = "ns", "demo", "dep-uid", "wl-uid", "rs-uid"
MESSAGE = "-a" * 2048  # 4 KiB
EVENTS = int(sys.argv[1]) if len(sys.argv) > 1 else 5


def pod(uid: str, *, ours: bool, rv: int) -> dict[str, Any]:
    owner = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{DEP}-5d4f8",
              "uid": RS_UID, "controller": True}] if ours else []
    return {"metadata": {"name": f"{DEP}-5d4f8-{uid}", "namespace": NS, "uid": uid,
                         "resourceVersion": str(rv), "ownerReferences": owner,
                         "labels": {c.LABEL_MANAGED_BY: c.APP_NAME, c.LABEL_INSTANCE: DEP,
                                    c.LABEL_COMPONENT: c.COMPONENT_SERVER,
                                    "pod-template-hash": "5d4f8"}},
            "status": {"conditions": [{"type": "Ready", "status": "True" if rv % 2 else "False"}],
                       "containerStatuses": [{"name": "triton", "restartCount": 3,
                                              "state": {"running": {}},
                                              "lastState": {"terminated": {
                                                  "exitCode": 1, "reason": "Error",
                                                  "finishedAt": "2026-11-27T10:00:00Z",
                                                  "message": MESSAGE}}}]}}


dep = {"apiVersion": c.API_VERSION, "kind": c.KIND,
       "metadata": {"name": DEP, "namespace": NS, "uid": DEP_UID, "resourceVersion": "1"},
       "spec": {}}
workload = {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": DEP, "namespace": NS, "uid": WL_UID, "resourceVersion": "1",
                         "labels": {c.LABEL_MANAGED_BY: c.APP_NAME},
                         "ownerReferences": [{"apiVersion": c.API_VERSION, "kind": c.KIND,
                                              "name": DEP, "uid": DEP_UID,
                                              "controller": True}]},
            "spec": {"replicas": 1}, "status": {}}
cache = Cache({BY_NAME[c.KIND].id: {(NS, DEP): [project_deployment(dep)]},
               BY_NAME["Deployment"].id: {(NS, DEP): [project_workload(workload)]}})
rec = Reconciler(None, OperatorSettings(), cache)  # type: ignore[arg-type]
rec.request = lambda ns, name: None  # type: ignore[method-assign]  # no pass: the handler's own cost


def per_event(uid: str, ours: bool) -> list[float]:
    out = []
    for rv in range(EVENTS):
        body = copy.deepcopy(pod(uid, ours=ours, rv=rv))
        t = time.perf_counter()
        rec.pod_changed(body)
        out.append(time.perf_counter() - t)
    return out


def main() -> None:
    for label, uid, ours in (("pod of our workload", "p1", True),
                             ("pod only labelled as ours", "p2", False)):
        s = per_event(uid, ours)
        print(f"{label}: first event {s[0]:.4f} s, later events median "
              f"{statistics.median(s[1:]):.6f} s ({EVENTS} events)")


if __name__ == "__main__":
    main()
