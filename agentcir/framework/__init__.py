"""The framework: the data that flows, component interfaces, recipes, the runner, the cache,
galleries, the methods, the dataset loaders and the evaluation (see ``agentcir/framework/README.md``)."""
