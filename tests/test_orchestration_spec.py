"""The farm spec: valid specs load, invalid ones fail naming the key path."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestration.errors import BackendNotAvailableError, SpecError
from orchestration.spec import load_spec, parse_spec
from orchestration.state import restart_delay

EXAMPLE = Path(__file__).resolve().parents[1] / "orchestration" / "examples" / "farm.yaml"


def _toy(**kw: object) -> dict[str, object]:
    return {"sandboxes": [{"kind": "toy", "env": "toy/text-task", **kw}]}


def test_example_spec_loads() -> None:
    spec = load_spec(EXAMPLE)
    assert [g.group for g in spec.sandboxes] == ["text-task", "click"]
    assert spec.kinds == ["browser", "toy"]
    assert spec.sandboxes[0].limits.pids == 64
    assert spec.control.metrics_port == 9464


def test_defaults_and_farm_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("FARM_HOME", str(tmp_path))
    spec = parse_spec(_toy(count=3))
    assert spec.state_path == tmp_path
    assert spec.control_address == f"unix://{tmp_path}/control.sock"
    assert spec.sandboxes[0].backend == "local"
    assert spec.sandboxes[0].count == 3
    assert parse_spec({**_toy(), "state_dir": "/x/y"}).control_address == "unix:///x/y/control.sock"


@pytest.mark.parametrize(
    ("data", "path", "words"),
    [
        (
            {"sandboxes": [{"kind": "androd", "env": "x"}]},
            "sandboxes[0].kind",
            "unknown kind 'androd'",
        ),
        (_toy(count=-1), "sandboxes[0].count", "count must be >= 0, got -1"),
        (_toy(cuont=3), "sandboxes[0].cuont", "unknown key 'cuont'; allowed: kind, env, count"),
        (_toy(count="four"), "sandboxes[0].count", "valid integer, got str 'four'"),
        (_toy(limits={"memory": 1}), "sandboxes[0].limits.memory", "allowed: memory_mb"),
        (_toy(limits={"pids": 0}), "sandboxes[0].limits.pids", "greater than 0"),
        (_toy(backend="k8s"), "sandboxes[0].backend", "unknown backend 'k8s'"),
        ({**_toy(), "contrl": {}}, "contrl", "unknown key 'contrl'"),
        ({**_toy(), "control": {"metrics_port": "x"}}, "control.metrics_port", "integer"),
        ({"sandboxes": []}, "sandboxes", "at least 1 item"),
        ({"sandboxes": [{"kind": "toy"}]}, "sandboxes[0].env", "required key is missing"),
    ],
)
def test_invalid_specs_name_the_key(data: dict[str, object], path: str, words: str) -> None:
    with pytest.raises(SpecError) as e:
        parse_spec(data, "farm.yaml")
    assert f"{path}: " in str(e.value)
    assert words in str(e.value)
    assert str(e.value).startswith("invalid farm spec farm.yaml:")


def test_every_problem_is_listed() -> None:
    with pytest.raises(SpecError) as e:
        parse_spec({"sandboxes": [{"kind": "x", "env": "e", "count": -2, "extra": 1}]})
    assert [p for p, _ in e.value.problems] == [
        "sandboxes[0].kind",
        "sandboxes[0].count",
        "sandboxes[0].extra",
    ]


def test_group_names_must_be_unique_and_paths_short(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"group name 'text-task' is also used by sandboxes\[0\]"):
        parse_spec({"sandboxes": [{"kind": "toy", "env": "toy/text-task"}] * 2})
    with pytest.raises(SpecError, match=r"state_dir: unix socket path longer than 107"):
        parse_spec({**_toy(), "state_dir": "/tmp/" + "x" * 120})
    with pytest.raises(SpecError, match=r"control.address: the control endpoint binds only"):
        parse_spec({**_toy(), "control": {"address": "10.1.2.3:5000"}})


def test_bad_yaml_and_missing_file(tmp_path: Path) -> None:
    bad = tmp_path / "farm.yaml"
    bad.write_text("sandboxes: [\n")
    with pytest.raises(SpecError, match="not valid YAML"):
        load_spec(bad)
    with pytest.raises(Exception, match="cannot read farm spec"):
        load_spec(tmp_path / "nope.yaml")
    bad.write_text("- 1\n")
    with pytest.raises(SpecError, match="expected a mapping at the top, got list"):
        load_spec(bad)


def test_unbuilt_backends_fail_clearly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestration.backends import make_backend

    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-daemon.sock")
    with pytest.raises(
        BackendNotAvailableError, match=r"no Docker daemon answers|docker Python SDK"
    ):
        make_backend("docker", tmp_path)


def test_restart_backoff_formula() -> None:
    opts = parse_spec({**_toy(), "restart": {"backoff_s": 0.5, "backoff_max_s": 3}}).restart
    assert [restart_delay(n, opts) for n in range(1, 7)] == [0.0, 0.5, 1.0, 2.0, 3.0, 3.0]
