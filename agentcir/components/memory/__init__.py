"""Memory components: the model-call cache, named photo subsets, compressed context. See README.md."""
