from setuptools import setup

setup(
    name="agentcir-testplugin",
    version="0.1",
    packages=["agentcir_testplugin", "agentcir_testplugin.recipes"],
    package_data={"agentcir_testplugin.recipes": ["*/*.yaml"]},
    entry_points={
        "agentcir.encoders": ["toy = agentcir_testplugin.components"],
        "agentcir.llms": ["counting = agentcir_testplugin.components"],
        "agentcir.methods": ["llm_then_rank = agentcir_testplugin.components"],
        "agentcir.recipes": ["testplugin = agentcir_testplugin.recipes"],
    },
)
