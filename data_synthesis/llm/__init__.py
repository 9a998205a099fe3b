"""LLM-backed synthesis through any OpenAI-compatible endpoint.

The paper synthesised RoleMRC with GPT-4o; users do the same with OpenAI, vLLM or
``transformers serve``. Everything here talks through the shared client
(:mod:`judging.client.client`: bounded concurrency, retries with backoff, an on-disk reply
cache so that a rerun never pays twice), which judging (:mod:`judging`) uses too.

Modules:
    replies         JSON extraction from chatty replies + pydantic validation + repair rounds
    retrieval       TF-IDF matching of role profiles to relevant / irrelevant passages
    prompts         the synthesis prompts (profile, reply, free chat) and their reply schemas
    synthesis       ``synthesize_llm``: the paper's three stages, offline files and schemas
"""
