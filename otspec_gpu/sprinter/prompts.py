"""Prompts for SPRINTER's data and experiments: topics crossed with instructions.

Train / test disjointness is by **topic** (:func:`split_topics`): a held-out prompt shares neither
its text nor its topic with any training prompt.
"""

from __future__ import annotations

import numpy as np

from otspec.errors import SprinterInputError

__all__ = ["TEMPLATES", "TOPICS", "prompts_for", "split_topics"]

TOPICS = (
    "volcanoes",
    "the history of the bicycle",
    "how vaccines work",
    "black holes",
    "sourdough bread",
    "the French Revolution",
    "photosynthesis",
    "chess openings",
    "coral reefs",
    "the internet",
    "honeybees",
    "climate change",
    "the Roman aqueducts",
    "jazz music",
    "electric cars",
    "the human heart",
    "desert plants",
    "the printing press",
    "earthquakes",
    "octopuses",
    "solar panels",
    "the Moon landing",
    "tea ceremonies",
    "glaciers",
)

TEMPLATES = (
    "Write a short paragraph about {}.",
    "Explain {} to a ten-year-old.",
    "Give three interesting facts about {}.",
)


def prompts_for(topics) -> list[str]:
    """Every template applied to every topic (topic-major order).

    Parameters
    ----------
    topics : iterable of str
        Topics (e.g. one side of :func:`split_topics`).

    Returns
    -------
    list of str
        ``len(topics) * len(TEMPLATES)`` prompts.

    Examples
    --------
    >>> prompts_for(["tides"])[0]
    'Write a short paragraph about tides.'
    """
    return [t.format(topic) for topic in topics for t in TEMPLATES]


def split_topics(n_test: int, *, seed: int = 0) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(train_topics, test_topics)``: a seeded split of :data:`TOPICS` with ``n_test`` held out.

    Parameters
    ----------
    n_test : int
        Number of held-out topics, in ``[1, len(TOPICS) - 1]``.
    seed : int
        Seed of the permutation.

    Returns
    -------
    train_topics, test_topics : tuple of str
        Disjoint, each in :data:`TOPICS` order.

    Raises
    ------
    SprinterInputError
        If ``n_test`` is out of range.

    Examples
    --------
    >>> tr, te = split_topics(6, seed=0)
    >>> len(tr), len(te), set(tr) & set(te)
    (18, 6, set())
    """
    if not (1 <= n_test < len(TOPICS)):
        raise SprinterInputError(f"n_test must lie in [1, {len(TOPICS) - 1}] (got {n_test!r})")
    perm = np.random.default_rng(seed).permutation(len(TOPICS))
    test = tuple(TOPICS[i] for i in sorted(perm[:n_test]))
    train = tuple(t for t in TOPICS if t not in test)
    return train, test
