"""Training the realistic drafts of SmolLM2 on this machine's local text (see ``docs/trained_drafts.rst``).

Modules: :mod:`~otspec_gpu.training.corpus` (the local text and the training prompts),
:mod:`~otspec_gpu.training.features` (the target's cached features),
:mod:`~otspec_gpu.training.dataset` (both, built once into the cache).
"""

__all__: list[str] = []
