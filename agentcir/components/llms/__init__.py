"""LLM backends (``openai``, ``transformers``, ``rules``) and what they share: the task table,
reply parsing and the HTTP plumbing of OpenAI-compatible endpoints. See README.md."""
