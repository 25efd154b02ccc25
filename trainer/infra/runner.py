"""Where a job runs: in this process (default), or in a Ray actor on the cluster of a
Ray farm (``runtime: ray``, or ``auto`` when the farm the job leases from runs its
sandboxes on Ray). The actor is pinned to this node: the farm's control socket and
the run directory are local files here."""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from trainer.api.spec import JobSpec, parse_spec
from trainer.errors import JobSpecError
from trainer.infra.job import Job, JobResult

log = logging.getLogger("farm.trainer.runner")


def _farm_status(spec: JobSpec) -> Any | None:
    if spec.sandboxes.source not in ("auto", "farm"):
        return None
    from orchestration.client import FarmClient, default_address
    from orchestration.errors import FarmNotRunningError

    address = spec.sandboxes.farm or default_address()
    try:
        with FarmClient(address) as client:
            return client.status(timeout=3.0)
    except FarmNotRunningError:
        return None


def _ray_address(status: Any | None) -> str | None:
    """The Ray address of the farm's spec, or None when it has no reachable cluster."""
    if status is None or not status.spec_path:
        return os.environ.get("RAY_ADDRESS") or "auto"
    from orchestration.backends.ray import ray_address
    from orchestration.spec import load_spec as load_farm_spec

    try:
        address = ray_address(load_farm_spec(status.spec_path))
    except Exception:  # noqa: BLE001 - the spec file may be gone
        address = None
    if address == "local":
        return None  # a private cluster inside the farm's controller: nobody can join it
    return address or os.environ.get("RAY_ADDRESS") or "auto"


def choose_runtime(spec: JobSpec) -> tuple[str, JobSpec, str | None]:
    """(runtime, spec with the farm address pinned, ray address)."""
    if spec.runtime == "inprocess":
        return "inprocess", spec, None
    status = _farm_status(spec)
    on_ray = status is not None and any(
        s.backend == "ray" and s.env == spec.sandboxes.env for s in status.sandboxes
    )
    if spec.runtime == "auto" and not on_ray:
        return "inprocess", spec, None
    address = _ray_address(status)
    if address is None:
        if spec.runtime == "ray":
            raise JobSpecError(
                "runtime: ray, but the farm runs a private Ray cluster (ray.address: local) "
                "that a job cannot join; start the farm on a shared cluster (`ray start`)"
            )
        return "inprocess", spec, None
    data = spec.model_dump()
    if status is not None:
        data["sandboxes"]["farm"] = status.control_address
        data["sandboxes"]["source"] = "farm"
    return "ray", parse_spec(data), address


def submit(
    spec: JobSpec, *, run_dir: str | Path, resume: bool = False, progress: bool = True
) -> JobResult:
    runtime, spec, address = choose_runtime(spec)
    if runtime == "inprocess":
        return Job(spec, run_dir=run_dir, resume=resume, progress=progress).run()
    return run_on_ray(spec, Path(run_dir).resolve(), resume, address or "auto", progress)


def _job_on_ray(spec_data: dict[str, Any], run_dir: str, resume: bool) -> dict[str, Any]:
    """The actor's body: the same Job, in a Ray worker process."""
    spec = parse_spec(spec_data)
    result = Job(spec, run_dir=run_dir, resume=resume, progress=False).run()
    summary = result.summary()
    summary["runtime"] = "ray"
    summary["ray_worker_pid"] = os.getpid()
    return summary


def run_on_ray(
    spec: JobSpec, run_dir: Path, resume: bool, address: str, progress: bool
) -> JobResult:
    from orchestration.backends.ray import connect

    ray, connected = connect(address)
    try:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        node = ray.get_runtime_context().get_node_id()
        remote = ray.remote(num_cpus=0, max_retries=0)(_job_on_ray)
        ref = remote.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node, soft=False),
            name=f"farm-job-{spec.name}",
        ).remote(spec.model_dump(), str(run_dir), resume)
        if progress:
            print(f"job {spec.name} runs on Ray (node {node[:12]}); run dir {run_dir}", flush=True)
        metrics = run_dir / "metrics.jsonl"
        while True:
            ready, _ = ray.wait([ref], timeout=15.0)
            if ready:
                break
            if progress and metrics.exists():
                lines = [ln for ln in metrics.read_text().splitlines() if '"kind": "train"' in ln]
                if lines:
                    r = json.loads(lines[-1])
                    print(
                        f"[{time.strftime('%H:%M:%S')}] v{r['version']} episodes {r['episodes']} "
                        f"train success {r.get('train_success')} "
                        f"learner utilisation {r['learner_utilisation']:.2f}",
                        flush=True,
                    )
        s = ray.get(ref)
    finally:
        if connected:
            ray.shutdown()
    return JobResult(
        run_dir=Path(s["run_dir"]),
        version=s["version"],
        stop_reason=s["stop_reason"],
        train_elapsed_s=s["train_elapsed_s"],
        evals=s["evals"],
        samples=s["samples"],
        episodes=s["episodes"],
        learner_utilisation=s["learner_utilisation"],
        resumed_from=s["resumed_from"],
        runtime=f"ray (worker pid {s['ray_worker_pid']})",
    )
