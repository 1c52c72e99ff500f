"""The check of a policy that schedules Bags of Tasks: refused at load on a workload without bags."""

from __future__ import annotations

from typing import Any


def require_bag_workload(name: str, experiment: Any, schedules: str = "Bags of Tasks") -> None:
    """ValueError naming policy ``name`` (which schedules ``schedules``) unless ``experiment``'s workload is made of
    Bags of Tasks (a bag list, a bag stream, or a SWF trace cut into bags): said when the file is loaded, not as a
    failure once its first job without a bag waits."""
    from mgst.model import BagList, BagStream, SwfTrace  # noqa: PLC0415 (only when an experiment is checked)

    workload = experiment.workload
    if isinstance(workload, BagList | BagStream) or (isinstance(workload, SwfTrace) and workload.bags != "none"):
        return
    raise ValueError(f"policy {name} schedules {schedules}: it needs a bag workload "
                     f"(workload.kind = \"bag_list\" or \"bags\"), not {type(workload).__name__}")
