"""Every numeric recipe field has a range, checked when the recipe is composed; recipe folders and files
that cannot be read are clear errors naming them."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import pytest

from agentcir.framework.errors import InputError
from agentcir.framework.recipe import KernelsConfig, RunConfig, compose
from agentcir.registry import REGISTRIES, ConfigError, make_config
from agentcir.registry.config import DEFAULT_RANGE, NAMED_RANGES, RANGE, Range, bounded, check_ranges, field_range


def compose_here(tmp_path, *overrides, **kw):
    return compose([f"run.root={tmp_path}", *overrides], check_devices=False, **kw)


@pytest.mark.parametrize(
    "overrides, msg",
    [
        (
            ["dataset.limit=-5"],
            r"dataset 'demo': field 'limit': must be at least 0 \(0: all, N >= 1: the first N\), got -5",
        ),
        (["method.lam=nan"], r"method 'octopus': field 'lam': must be a finite number within 0\.\.1, got nan"),
        (["method.lam=inf"], r"field 'lam': must be a finite number within 0\.\.1, got inf"),
        (["method.num_proxies=-3"], r"method 'octopus': field 'num_proxies': must be at least 1, got -3"),
        (["method.tau=0"], r"method 'octopus': field 'tau': must be above 0, got 0"),
        (["method.gate=1.5"], r"field 'gate': must be within 0\.\.1, got 1\.5"),
        (["method=xr", "method.k_prime=-1"], r"method 'xr': field 'k_prime': must be at least 1, got -1"),
        (["method=xr", "method.tau=-0.5"], r"method 'xr': field 'tau': must be within 0\.\.1, got -0\.5"),
        (
            ["method=imageseeker", "method.max_steps=-1"],
            r"method 'imageseeker': field 'max_steps': must be at least 1, got -1",
        ),
        (["method=imageseeker", "method.context_budget=0"], r"field 'context_budget': must be at least 1, got 0"),
        (["llm=openai", "llm.timeout=-2"], r"llm 'openai': field 'timeout': must be above 0, got -2"),
        (["llm=openai", "llm.timeout=nan"], r"llm 'openai': field 'timeout': must be a finite number above 0, got nan"),
        (["llm=openai", "llm.retries=-1"], r"llm 'openai': field 'retries': must be at least 0, got -1"),
        (["llm=openai", "llm.temperature=-0.1"], r"field 'temperature': must be at least 0, got -0\.1"),
        (["encoder.batch_size=0"], r"encoder 'catalog': field 'batch_size': must be at least 1, got 0"),
        (
            ["captioner.min_margin={patterns: 1.5}"],
            r"captioner 'tagger': field 'min_margin\.patterns': must be within -1\.\.1, got 1\.5",
        ),
        (["detector.grids=[1,0]"], r"detector 'crop_tagger': field 'grids\[1\]': must be at least 1, got 0"),
        (["run.concurrency=0"], r"run: field 'concurrency': must be at least 1, got 0"),
        (["run.show=-1"], r"run: field 'show': must be at least 0, got -1"),
        (["run.max_image_pixels=-1"], r"run: field 'max_image_pixels': must be at least 0, got -1"),
        (["method.max_verified=-1"], r"method 'octopus': field 'max_verified': must be at least 0, got -1"),
        (
            ["+scale=local", "scale.shards=2", "scale.concurrency=-1"],
            r"scale: field 'concurrency': must be at least 0 \(0: fill the cluster\), got -1",
        ),
    ],
)
def test_out_of_range_values_fail_at_compose(tmp_path, overrides, msg):
    with pytest.raises(ConfigError, match=msg):
        compose_here(tmp_path, *overrides)


def test_bounds_themselves_are_accepted(tmp_path):
    r = compose_here(tmp_path, "method.lam=0", "method.gate=1", "dataset.limit=1", "run.show=0")
    assert (r["method"]["lam"], r["method"]["gate"], r["dataset"]["limit"]) == (0.0, 1.0, 1)
    r = compose_here(tmp_path, "method=imageseeker", "method.visual_z=-1.5")  # declared: any finite number
    assert r["method"]["visual_z"] == -1.5


def every_config():
    from agentcir.components.encoders.catalog_train import TrainConfig
    from agentcir.framework.scale import ScaleConfig

    yield "run", RunConfig
    yield "kernels", KernelsConfig
    yield "scale", ScaleConfig
    yield "train-encoder", TrainConfig
    for kind, reg in REGISTRIES.items():
        for key in reg.keys():
            yield f"{kind} '{key}'", reg.config_class(key)


def test_every_registered_config_has_ranges_its_defaults_satisfy():
    """Each numeric field resolves to a range (declared, by name or the default), and every default
    is inside it: the ranges describe the software as shipped."""
    seen = 0
    for where, cls in every_config():
        cfg = cls()
        check_ranges(cfg, where=where)  # raises for a default outside its range
        for f in dataclasses.fields(cls):
            if isinstance(getattr(cfg, f.name), (int, float)) and not isinstance(getattr(cfg, f.name), bool):
                assert isinstance(field_range(f), Range)
                seen += 1
    assert seen > 100


def test_bounded_fields_and_the_default_range():
    @dataclass
    class C:
        lam: float = bounded(0.5, 0.0, 1.0)
        tau: float = bounded(0.1, 0, lo_open=True)
        z: float = bounded(0.0, None)
        sizes: list = bounded(lo=2, default_factory=lambda: [2, 3])
        weights: dict = field(default_factory=lambda: {"a": 1.0})
        count: int = 3
        batch_size: int = 4
        maybe: int | None = None
        flag: bool = False

    fields = {f.name: f for f in dataclasses.fields(C)}
    assert fields["lam"].metadata[RANGE] == Range(0.0, 1.0)
    assert (
        field_range(fields["count"]) is DEFAULT_RANGE
        and field_range(fields["batch_size"]) is NAMED_RANGES["batch_size"]
    )
    ok = make_config(C, {"z": -7.0, "maybe": None}, where="thing 'c'")
    assert ok.z == -7.0 and ok.maybe is None
    for values, msg in [
        ({"lam": 1.01}, r"thing 'c': field 'lam': must be within 0\.\.1, got 1\.01"),
        ({"tau": 0.0}, r"field 'tau': must be above 0, got 0"),
        ({"z": float("nan")}, r"field 'z': must be a finite number, got nan"),
        ({"sizes": [2, 1]}, r"field 'sizes\[1\]': must be at least 2, got 1"),
        ({"weights": {"a": -1.0}}, r"field 'weights\.a': must be at least 0, got -1"),
        ({"count": -1}, r"field 'count': must be at least 0, got -1"),
        ({"batch_size": 0}, r"field 'batch_size': must be at least 1, got 0"),
        ({"maybe": -4}, r"field 'maybe': must be at least 0, got -4"),
    ]:
        with pytest.raises(ConfigError, match=msg):
            make_config(C, values, where="thing 'c'")


def test_a_component_built_from_a_mapping_is_range_checked():
    from agentcir.registry import METHODS

    with pytest.raises(ConfigError, match=r"method 'octopus': field 'num_proxies': must be at least 1, got -2"):
        METHODS.build("octopus", {"num_proxies": -2})


# -- recipe folders and files ---------------------------------------------------------------------------
def test_malformed_recipe_yaml_names_the_file(tmp_path):
    d = tmp_path / "mine"
    (d / "method").mkdir(parents=True)
    bad = d / "method" / "broken.yaml"
    bad.write_text("name: octopus\nlam: [0.1, 0.2\n")
    with pytest.raises(
        InputError, match=rf"recipe file '{bad}', line \d+, column \d+: malformed YAML \(.*\); fix the file"
    ):
        compose_here(tmp_path, "method=broken", extra_dirs=[str(d)])


def test_a_missing_recipes_folder_is_an_error(tmp_path):
    with pytest.raises(InputError, match=rf"recipe folder '{tmp_path / 'nowhere'}' \(--recipes\) does not exist"):
        compose_here(tmp_path, extra_dirs=[str(tmp_path / "nowhere")])
    (tmp_path / "file.yaml").write_text("a: 1\n")
    with pytest.raises(InputError, match=r"\(--recipes\) is not a folder"):
        compose_here(tmp_path, extra_dirs=[str(tmp_path / "file.yaml")])


def test_an_unknown_group_option_suggests_the_closest(tmp_path):
    with pytest.raises(InputError, match=r"method 'octopuss'.*did you mean 'octopus'\?"):
        compose_here(tmp_path, "method=octopuss")
    d = tmp_path / "mine"
    (d / "method").mkdir(parents=True)
    (d / "method" / "my_octopus.yaml").write_text("name: octopus\nlam: 0.3\n")
    with pytest.raises(InputError, match=r"did you mean 'my_octopus'\?"):
        compose_here(tmp_path, "method=my_octopu", extra_dirs=[str(d)])


def test_the_cli_prints_these_errors_in_one_line(tmp_path, capsys):
    from agentcir.cli import main

    assert main(["run", "--print-recipe", f"run.root={tmp_path}", "method.lam=nan"]) == 2
    assert capsys.readouterr().err.strip() == (
        "agentcir run: error: method 'octopus': field 'lam': must be a finite number within 0..1, got nan"
    )
    assert main(["run", "--print-recipe", "--recipes", str(tmp_path / "nope")]) == 2
    assert "recipe folder" in capsys.readouterr().err
