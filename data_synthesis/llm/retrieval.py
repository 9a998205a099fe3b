"""Match each role profile to its most and least relevant passage by TF-IDF similarity.

The paper pairs every role with a "Most Relevant MRC" and a "Least Relevant MRC" item
by a match score. We do the same offline and deterministically: a TF-IDF model fitted
on the passages (scikit-learn), cosine similarity between a profile's text and every
passage. The relevant passage is the best match INSIDE the role's knowledge domains
(so "within the boundary" stays true by construction), the irrelevant one the worst
match OUTSIDE them (``k`` of each: a paper MRC item bundles several passages, and a few
per role keep the training episodes from repeating one question). Ties break on the lower passage index, so results do
not depend on hash order or thread timing.

Example:
    >>> m = match_passages(["a sailor who knows ships and tides"], ["ships sail on tides", "bread needs yeast"],
    ...                    passage_domains=["sea", "food"], role_domains=[["sea"]])
    >>> (m[0].relevant, m[0].irrelevant)
    ((0,), (1,))
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from core.errors import ProbeError


@dataclass(frozen=True)
class Match:
    """Passage indices, best first: ``relevant`` inside the role's domains,
    ``irrelevant`` outside (least similar first)."""

    relevant: tuple[int, ...]
    relevant_scores: tuple[float, ...]
    irrelevant: tuple[int, ...]
    irrelevant_scores: tuple[float, ...]


def similarity(profiles: Sequence[str], passages: Sequence[str]) -> np.ndarray:
    """Cosine similarity [n_profiles, n_passages] under a TF-IDF model fitted on the passages."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.metrics.pairwise import cosine_similarity

    if not passages:
        raise ProbeError("the passage pool is empty; nothing to match roles against")
    vectorizer = TfidfVectorizer(stop_words="english", sublinear_tf=True, ngram_range=(1, 2))
    passage_matrix = vectorizer.fit_transform(passages)
    return np.asarray(cosine_similarity(vectorizer.transform(profiles), passage_matrix))


def match_passages(
    profiles: Sequence[str],
    passages: Sequence[str],
    *,
    passage_domains: Sequence[str],
    role_domains: Sequence[Sequence[str]],
    k: int = 1,
) -> list[Match]:
    """For each profile: the ``k`` best passages within its domains and the ``k`` worst outside them."""
    if k < 1:
        raise ProbeError(f"passages per role must be at least 1, got {k}")
    if len(passage_domains) != len(passages) or len(role_domains) != len(profiles):
        raise ValueError("passage_domains / role_domains must align with passages / profiles")
    scores = similarity(profiles, passages)
    matches = []
    for row, domains in zip(scores, role_domains, strict=True):
        inside = [j for j, d in enumerate(passage_domains) if d in domains]
        outside = [j for j, d in enumerate(passage_domains) if d not in domains]
        if not inside or not outside:
            raise ProbeError(
                f"a role with domains {sorted(domains)} needs passages both inside and outside its domains"
            )
        best = sorted(inside, key=lambda j: (-row[j], j))[:k]
        worst = sorted(outside, key=lambda j: (row[j], j))[:k]
        matches.append(
            Match(tuple(best), tuple(float(row[j]) for j in best), tuple(worst), tuple(float(row[j]) for j in worst))
        )
    return matches
