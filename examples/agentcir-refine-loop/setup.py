from setuptools import setup

setup(
    name="agentcir-refine-loop",
    version="0.1.0",
    description="A plan -> retrieve -> critique/refine retrieval method for agentcir (a worked plugin)",
    packages=["agentcir_refine_loop", "agentcir_refine_loop.prompts", "agentcir_refine_loop.recipes"],
    package_data={"agentcir_refine_loop.prompts": ["refine_loop/*.txt"], "agentcir_refine_loop.recipes": ["*/*.yaml"]},
    install_requires=["agentcir"],
    entry_points={
        # the method, found by its registry key (method=refine_loop)
        "agentcir.methods": ["refine_loop = agentcir_refine_loop.method"],
        # the LLM tasks it runs (imported when a task name is looked up)
        "agentcir.tasks": ["refine_loop = agentcir_refine_loop.tasks"],
        # its prompt files (prompt names refine_loop/plan, refine_loop/critique)
        "agentcir.prompts": ["refine_loop = agentcir_refine_loop.prompts"],
        # its recipe (recipes/method/refine_loop.yaml: the defaults of `method=refine_loop`)
        "agentcir.recipes": ["refine_loop = agentcir_refine_loop.recipes"],
    },
)
