"""The one Registry class: registration, lazy look-up, plugins, exact error messages."""

from dataclasses import dataclass

import pytest

from agentcir.registry import DATASETS, ENCODERS, REGISTRIES, ConfigError, Registry, RegistryError


def fresh():
    return Registry("widget", {"lazy_one": "agentcir_nonexistent_module_for_tests"})


def test_register_build_and_typed_config():
    reg = fresh()

    @reg.register("a")
    class A:
        @dataclass
        class Config:
            size: int = 3
            name: str = "x"

        def __init__(self, cfg):
            self.cfg = cfg

    obj = reg.build("a", {"size": "5"})
    assert obj.cfg.size == 5 and obj.cfg.name == "x" and obj.registry_key == "a"
    assert reg.keys() == ["a", "lazy_one"]
    with pytest.raises(ConfigError) as e:
        reg.build("a", {"size": "big"})
    assert str(e.value).startswith(
        "widget 'a': field 'size': Value 'big' of type 'str' could not be converted to Integer"
    )
    with pytest.raises(ConfigError) as e:
        reg.build("a", {"colour": 1})
    assert str(e.value) == "widget 'a': unknown field 'colour'; valid fields: name, size"


def test_unknown_key_message_lists_available():
    reg = fresh()
    reg.register("b")(type("B", (), {"Config": dataclass(type("Config", (), {}))}))
    with pytest.raises(RegistryError) as e:
        reg.get("nope")
    assert str(e.value) == "unknown widget 'nope'; available widgets: b, lazy_one"


def test_duplicate_key_message():
    reg = fresh()

    @dataclass
    class C:
        pass

    class First:
        Config = C

    class Second:
        Config = C

    reg.register("dup")(First)
    with pytest.raises(RegistryError) as e:
        reg.register("dup")(Second)
    mod = __name__
    assert str(e.value) == (
        f"duplicate widget key 'dup': already registered by {mod}.test_duplicate_key_message.<locals>.First, "
        f"registered again by {mod}.test_duplicate_key_message.<locals>.Second"
    )


def test_registration_needs_a_config_dataclass():
    reg = fresh()
    with pytest.raises(TypeError, match="widget 'noconf' .* needs a Config dataclass"):
        reg.register("noconf")(type("NoConf", (), {}))


def test_lazy_key_whose_module_does_not_register_it():
    reg = Registry("widget", {"ghost": "json"})  # json imports fine but registers nothing
    with pytest.raises(RegistryError) as e:
        reg.get("ghost")
    assert str(e.value) == (
        "widget 'ghost' is declared in module 'json', but importing it did not register it "
        "(expected @WIDGETS.register('ghost') there)"
    )


def test_every_builtin_key_registers_from_its_module():
    for kind, reg in REGISTRIES.items():
        for key in reg._lazy:
            entry = reg.get(key)
            assert entry.key == key, (kind, key)


def test_plugin_entry_points(plugin_path):
    assert "toy" in ENCODERS.keys()
    enc = ENCODERS.build("toy", {"seed": 1})
    assert enc.dim == 24 and enc.registry_key == "toy"
    assert type(enc).__module__ == "agentcir_testplugin.components"


def test_plugin_may_not_shadow_a_builtin_key(monkeypatch):
    class EP:
        name, value = "demo", "evil.module"

    monkeypatch.setattr(
        "agentcir.registry.registry.metadata.entry_points", lambda group: [EP()] if group == "agentcir.datasets" else []
    )
    monkeypatch.setattr(DATASETS, "_plugins", None)
    with pytest.raises(RegistryError) as e:
        DATASETS.keys()
    assert str(e.value) == (
        "duplicate dataset key 'demo': built in (agentcir.framework.datasets.composed) and declared again "
        "by plugin entry point 'evil.module' in group 'agentcir.datasets'"
    )
    monkeypatch.setattr(DATASETS, "_plugins", None)
