"""LLM-backed synthesis and judging through any OpenAI-compatible endpoint.

The paper synthesised RoleMRC with GPT-4o and judged with GPT-4-turbo; users do the
same with OpenAI, vLLM or ``transformers serve``. Everything here talks through the
``openai`` client (:mod:`data_synthesis.llm.client`), which adds bounded concurrency,
retries with backoff and an on-disk reply cache so that a rerun never pays twice.

Modules:
    config          ``ClientConfig``: endpoint, model, key variable, limits (flags or OPENAI_* env)
    client          ``LLMClient``: retries, bounded concurrency, cache, key hygiene
    cache           one atomically written JSON file per answered request
    backoff         exponential backoff with jitter, honouring ``Retry-After``
    replies         JSON extraction from chatty replies + pydantic validation + repair rounds
    retrieval       TF-IDF matching of role profiles to relevant / irrelevant passages
    prompts         the synthesis prompts (profile, reply, free chat) and their reply schemas
    synthesis       ``synthesize_llm``: the paper's three stages, offline files and schemas
    judging         ``judge_files``: rules / LLM / both over a test file and a responses file
"""
