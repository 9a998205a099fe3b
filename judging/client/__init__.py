"""One client for every OpenAI-compatible endpoint (OpenAI, vLLM, ``transformers serve``).

Synthesis (:mod:`data_synthesis.llm`) and the LLM judge (:mod:`judging.llm`) both
talk through it, so retries, the reply cache and key hygiene behave the same in each.

Modules:
    config          ``ClientConfig``: endpoint, model, key variable, limits (flags or OPENAI_* env)
    client          ``LLMClient``: retries, bounded concurrency, cache, key hygiene
    transport       the ``openai`` client over ``httpx2`` under a total deadline and a 16 MiB body cap; JSON depth,
                    compressed bodies and redirects to another origin refused in one line
    scrub           server text without the key (any 8 characters of it), URL credentials or control sequences
    cache           one atomically written JSON file per answered request
    backoff         exponential backoff with jitter, honouring ``Retry-After``
"""
