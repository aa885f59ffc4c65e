"""Every recipe YAML lists its component's fields at the registered Config dataclass's defaults.

A default is written twice (the dataclass beside the component and the group's YAML file, which
documents it for recipe authors); these tests keep the two equal and complete.
"""

from __future__ import annotations

import dataclasses
import enum
from pathlib import Path

import pytest
import yaml

from agentcir.registry import REGISTRIES

RECIPES = Path(__file__).resolve().parents[2] / "agentcir" / "recipes"
GROUP_FILES = [(g, p) for g in REGISTRIES for p in sorted((RECIPES / g).glob("*.yaml"))]


def _default(field: dataclasses.Field):
    if field.default is not dataclasses.MISSING:
        value = field.default
    elif field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
    else:
        return dataclasses.MISSING
    if dataclasses.is_dataclass(value):
        return dataclasses.asdict(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple):
        return list(value)
    return value


def mismatches(path: Path, cls: type, *, skip: tuple[str, ...] = ("name",)) -> list[str]:
    """What differs between the YAML file ``path`` and the defaults of dataclass ``cls``:
    a value that is not the default, a key that is no field, a field the file does not list."""
    values = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    fields = {f.name: f for f in dataclasses.fields(cls) if f.name not in skip}
    out = []
    for key, value in values.items():
        if key in skip:
            continue
        if key not in fields:
            out.append(f"{key}: not a field of {cls.__name__}")
        elif (default := _default(fields[key])) is dataclasses.MISSING:
            continue  # a required field: the file shows an example value
        elif value != default:
            out.append(f"{key}: the file says {value!r}, {cls.__name__} says {default!r}")
    out += [f"{name}: a field of {cls.__name__} the file does not list" for name in fields if name not in values]
    return out


@pytest.mark.parametrize("group,path", GROUP_FILES, ids=[f"{g}/{p.stem}" for g, p in GROUP_FILES])
def test_group_yaml_equals_its_config_defaults(group, path):
    key = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("name", path.stem)
    cls = REGISTRIES[group].config_class(key)
    assert mismatches(path, cls) == [], f"{path.relative_to(RECIPES)} vs {group} '{key}'"


def test_every_group_has_files():
    assert {g for g, _ in GROUP_FILES} == set(REGISTRIES)


def test_scale_yaml_equals_scale_config():
    from agentcir.framework.scale import ScaleConfig

    # selecting a scale preset means a sharded gallery (shards: 4, where ScaleConfig's 0 is unsharded);
    # scale/ray.yaml also names its engine
    assert mismatches(RECIPES / "scale" / "local.yaml", ScaleConfig, skip=("shards",)) == []
    assert mismatches(RECIPES / "scale" / "ray.yaml", ScaleConfig, skip=("shards", "engine")) == []


def test_train_yaml_equals_train_config():
    from agentcir.components.encoders.catalog_train import TrainConfig

    # The recipe holds the settings the bundled tower was trained with. TrainConfig keeps, for these
    # fields, the value that reproduces a run saved before the field existed (a resumed run's missing
    # fields take the dataclass default: catalog_train._check_resume), so they differ on purpose.
    legacy = ("epochs", "batch_size", "members", "full_weight", "eval_every")
    assert mismatches(RECIPES / "train" / "catalog.yaml", TrainConfig, skip=legacy) == []


def test_a_changed_default_is_reported(tmp_path):
    @dataclasses.dataclass
    class Config:
        top_k: int = 100
        lam: float = 0.2
        texts: list = dataclasses.field(default_factory=lambda: ["a"])

    good = tmp_path / "good.yaml"
    good.write_text("name: x\ntop_k: 100\nlam: 0.2\ntexts: [a]\n")
    assert mismatches(good, Config) == []
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ntop_k: 50\nlamda: 0.2\n")
    assert mismatches(bad, Config) == [
        "top_k: the file says 50, Config says 100",
        "lamda: not a field of Config",
        "lam: a field of Config the file does not list",
        "texts: a field of Config the file does not list",
    ]
