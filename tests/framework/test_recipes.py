"""Every recipe file composes and builds; bad recipes fail at compose time naming the field."""

import pytest

from agentcir.framework.errors import InputError
from agentcir.framework.recipe import GROUPS, RECIPES_DIR, ComponentPool, compose
from agentcir.registry import ConfigError, RegistryError

GROUP_FILES = sorted(
    (g, p.stem) for g in GROUPS if (RECIPES_DIR / g).is_dir() for p in (RECIPES_DIR / g).glob("*.yaml")
)
EXPERIMENTS = sorted(p.stem for p in (RECIPES_DIR / "experiment").glob("*.yaml"))
KERNELS = sorted(p.stem for p in (RECIPES_DIR / "kernels").glob("*.yaml"))


VISION_LLM_USERS = {("captioner", "vlm"), ("detector", "vlm"), ("verifier", "vlm")}


def test_there_are_recipes():
    assert GROUP_FILES and ("method", "image_text_sum") in GROUP_FILES


@pytest.mark.parametrize("group,option", GROUP_FILES, ids=[f"{g}/{o}" for g, o in GROUP_FILES])
def test_every_group_recipe_composes_and_builds(group, option, tmp_path):
    # the vision-language components need an llm that reads images: the default (rules) cannot
    companion = ["llm=openai"] if (group, option) in VISION_LLM_USERS else []
    if companion:
        with pytest.raises(ConfigError, match=f"{group} '{option}' needs llm 'rules' to serve images"):
            compose([f"{group}={option}", f"run.root={tmp_path}"])
    recipe = compose([f"{group}={option}", f"run.root={tmp_path}", *companion])
    assert recipe[group]["name"]
    if recipe[group]["name"] != "none":
        comp = ComponentPool(recipe).get(group)
        assert comp.registry_key == recipe[group]["name"]
        assert isinstance(comp.identity, str) and len(comp.identity) == 24


@pytest.mark.parametrize("option", KERNELS)
def test_kernels_recipes(option):
    assert compose([f"kernels={option}"])["kernels"]["backend"] == option


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_every_experiment_composes_and_builds(name, tmp_path):
    # the paper rows name CUDA devices: their availability is checked when they run, not here
    recipe = compose([f"+experiment={name}", f"run.root={tmp_path}"], check_devices=False)
    pool = ComponentPool(recipe)
    for g in GROUPS:
        if pool.has(g):
            pool.get(g)


def test_a_paper_row_checks_its_devices_when_it_would_run():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    from agentcir.registry.config import ConfigError

    with pytest.raises(ConfigError, match="encoder 'open_clip': field 'device': device 'cuda' is not available"):
        compose(["+experiment=octopus_paper"])


def test_defaults_are_filled_in():
    r = compose([])
    assert r["method"]["name"] == "octopus" and (r["method"]["lam"], r["method"]["num_proxies"]) == (0.2, 10)
    assert compose(["method=image_text_sum"])["method"] == {"name": "image_text_sum", "top_k": 50, "image_weight": 0.5}
    assert r["run"]["concurrency"] == 8 and r["kernels"] == {"backend": "auto"}


def test_field_override_is_typed():
    assert compose(["method.top_k=7"])["method"]["top_k"] == 7


def test_wrong_type_names_the_field():
    with pytest.raises(ConfigError) as e:
        compose(["method=image_text_sum", "method.top_k=many"])
    assert str(e.value).startswith(
        "method 'image_text_sum': field 'top_k': Value 'many' of type 'str' could not be converted to Integer"
    )


def test_unknown_field_names_the_field():
    with pytest.raises(ConfigError) as e:
        compose(["method=image_text_sum", "+method.colour=red"])
    assert str(e.value) == "method 'image_text_sum': unknown field 'colour'; valid fields: image_weight, top_k"


def test_unknown_run_field_and_bad_values():
    with pytest.raises(ConfigError, match="run: unknown field 'speed'"):
        compose(["+run.speed=3"])
    with pytest.raises(ConfigError, match="run: field 'concurrency': must be at least 1"):
        compose(["run.concurrency=0"])
    with pytest.raises(
        ConfigError, match="run: field 'gallery_dtype': must be one of float32, float16, int8, got 'int4'"
    ):
        compose(["run.gallery_dtype=int4"])
    assert compose(["run.gallery_dtype=int8"])["run"]["gallery_dtype"] == "int8"


def test_unknown_recipe_option_is_one_clear_line():
    with pytest.raises(InputError) as e:
        compose(["method=nope"])
    msg = str(e.value)
    assert "\n" not in msg and "method/nope" in msg and "image_text_sum" in msg


def test_unknown_registry_key_in_a_recipe():
    with pytest.raises(RegistryError, match=r"unknown method 'nope'; available methods: .*image_text_sum"):
        compose(["method.name=nope"])


def test_user_recipe_folder(tmp_path):
    (tmp_path / "method").mkdir()
    (tmp_path / "method" / "mine.yaml").write_text("name: text_only\ntop_k: 3\n")
    r = compose(["method=mine"], extra_dirs=[str(tmp_path)])
    assert r["method"]["name"] == "text_only" and r["method"]["top_k"] == 3


def test_missing_dependency_is_named(tmp_path):
    r = compose([f"run.root={tmp_path}", "~encoder"])  # the default recipe selects encoder=catalog
    with pytest.raises(InputError, match="the recipe selects no encoder"):
        ComponentPool(r).get("method")


def test_config_yaml_lists_every_run_field():
    import dataclasses

    import yaml

    from agentcir.framework.recipe import RunConfig

    listed = yaml.safe_load((RECIPES_DIR / "config.yaml").read_text())["run"]
    assert sorted(listed) == sorted(f.name for f in dataclasses.fields(RunConfig))


def test_plugins_ship_recipes(plugin_path):
    """Entry-point group ``agentcir.recipes``: a plugin's recipe folders are searched too."""
    r = compose(["encoder=toy", "llm=counting", "llm.delay=0.5"])
    assert r["encoder"] == {"name": "toy", "batch_size": 16, "seed": 0, "domain": "", "log": ""}
    assert r["llm"]["delay"] == 0.5
