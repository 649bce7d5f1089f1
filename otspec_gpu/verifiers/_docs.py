"""Docstring blocks shared by the torch verifiers (the numpydoc entries every ``sample`` /
``conditional`` repeats), filled in by :func:`fill_doc`.

A docstring line that holds only ``{name}`` (``name`` a key of :data:`BLOCKS`) is replaced by that
block, indented like the line; nothing else in the docstring changes (so LaTeX braces are safe).
"""

from __future__ import annotations

from otspec.plugin import filler

__all__ = ["BLOCKS", "fill_doc"]

_SHAPES_ALWAYS = "shapes, dtypes and devices are always checked"

#: The shared blocks, by name.
BLOCKS: dict[str, str] = {
    # single-step rules: p, q [B, V], drafts [B, k]
    "p_q": """p, q : torch.Tensor
    ``[B, V]`` (or ``[1, V]``, shared by every row of drafts) target and draft probability rows,
    float32 or float64.""",
    "drafts_iid": """drafts : torch.Tensor
    ``[B, k]`` long i.i.d. drafts (``k = drafts.shape[1]``).""",
    "generator": """generator : torch.Generator
    The only source of randomness (separate ``rand`` calls per family of uniforms).""",
    "validate": f"""validate : bool
    Also check the values of ``p``, ``q`` and ``drafts`` (synchronises on CUDA);
    {_SHAPES_ALWAYS}.""",
    "returns_law": """torch.Tensor
    ``[B, V]``: the exact output law :math:`\\pi(\\cdot \\mid \\bar x)` of each row, in ``p``'s dtype.""",
    "returns_step": """StepOutput
    ``accepted`` ``[B]`` (1 where the output is one of the drafts), ``token`` ``[B]`` and ``index``
    ``[B]`` (its first draft slot, ``-1`` if none).""",
    "raises_inputs": """InvalidDistributionError, ShapeMismatchError
    If ``p`` or ``q`` is malformed, or ``p``, ``q`` and ``drafts`` disagree in shape, dtype or device.""",
    "raises_count": """InvalidDraftCountError
    If the number of drafts is not one the rule takes.""",
    "raises": """InvalidDistributionError, ShapeMismatchError
    If ``p`` or ``q`` is malformed, or ``p``, ``q`` and ``drafts`` disagree in shape, dtype or device.
InvalidDraftsError
    If ``drafts`` is not a long tensor, or (``validate``) holds an id outside ``[0, V)`` or a draft
    with ``q = 0``.
InvalidDraftCountError
    If the number of drafts is not one the rule takes.""",
    "raises_greedy": """InvalidDraftsError
    If ``drafts`` is not a long tensor, or (``validate``) holds an id outside ``[0, V)`` or a draft
    with ``q = 0``, or cannot be greedy drafts of ``q``: the first ``k - 1`` are not its top tokens,
    or the last repeats one of them.""",
    "raises_distinct": """InvalidDraftsError
    If ``drafts`` is not a long tensor, or (``validate``) holds an id outside ``[0, V)`` or a draft
    with ``q = 0``, or a row repeats a token.""",
    "pass_prob": r"""pass_prob : array_like, callable or None
    Per-token pass probabilities :math:`a(x)` ``[V]`` or ``[B, V]`` (``None``: :math:`1\{p \ge q\}`, lossless).""",
    "naive_law": """law : {"iid", "without_replacement", "greedy"}
    How the drafts were drawn (fixes the first draft's marginal :math:`q_1`).""",
    "raises_law": """UnsupportedMethodError
    If ``law`` is unknown.""",
    # accept-schedule runs (schedule.sample_rounds / rounds_step): tokens, accept [B, R]
    "rounds_inputs": """tokens : torch.Tensor
    ``[B, R]`` long drafted tokens, in visiting order.
accept : torch.Tensor
    ``[B, R]`` float64 accept probabilities.
residual : torch.Tensor or callable
    ``[B, V]`` / ``[1, V]`` float64 weights of positive row mass, or a function returning a fresh
    such tensor (which this function may overwrite).""",
    "rounds_returns": """Returns
-------
torch.Tensor
    ``[B]`` long: the token of the first accepted round, else the residual draw.""",
    # chain rules: p [B, gamma + 1, V], q [B, gamma, V], drafts [B, gamma]
    "chain_inputs": """p : torch.Tensor
    ``[B, gamma + 1, V]`` target conditionals along each drafted block (row ``gamma``: the bonus law).
q : torch.Tensor
    ``[B, gamma, V]`` draft conditionals along it.
drafts : torch.Tensor
    ``[B, gamma]`` long drafted tokens.""",
    "chain_validate": f"""validate : bool
    Check the values (synchronises on CUDA): every row of ``p`` and ``q`` a distribution (finite,
    non-negative, summing to 1 within the dtype's tolerance; one fused pass per tensor) and every
    drafted token in ``[0, V)`` with positive draft probability. ``validate=False`` skips these
    ({_SHAPES_ALWAYS}): rows off the simplex then give a law that is not normalised.""",
    "chain_raises": """ShapeMismatchError
    If a tensor has the wrong shape or the three disagree.
InvalidDistributionError
    If ``p`` or ``q`` is not a float32/float64 tensor, or (``validate``) a row has a NaN, infinite
    or negative entry or does not sum to 1.
InvalidDraftsError
    If ``drafts`` is not an integer tensor, or (``validate``) holds an id outside ``[0, V)`` or a
    token of draft probability 0.""",
    # tree rules: p [B, k, gamma + 1, V], q [B, k, gamma, V], drafts [B, k, gamma]
    "tree_inputs": """p : torch.Tensor
    ``[B, k, gamma + 1, V]`` target conditionals along each drafted sequence (or
    ``[1, k, gamma + 1, V]``, shared by every row; see the module docstring).
q : torch.Tensor
    ``[B, k, gamma, V]`` draft conditionals (or ``[1, k, gamma, V]``, shared, with ``p``).
drafts : torch.Tensor
    ``[B, k, gamma]`` long drafted sequences.
rule : {"kseq", "rrs", "rrs_wor"}
    The per-node single-step rule.""",
    "tree_validate": f"""validate : bool
    Check the values (synchronises on CUDA): every row of ``p`` and ``q`` a distribution (one fused
    pass per tensor), drafted tokens in ``[0, V)`` with positive draft probability, distinct first
    tokens for ``rrs_wor``. ``validate=False`` skips these ({_SHAPES_ALWAYS}).""",
    "tree_raises": """ShapeMismatchError
    If a tensor has the wrong shape or the three disagree.
InvalidDistributionError
    If ``p`` or ``q`` is not a float32/float64 tensor, or (``validate``) a row is not a distribution.
InvalidDraftsError
    If ``drafts`` is not an integer tensor, or (``validate``) holds an invalid token, a token of
    draft probability 0, or repeated first tokens for ``rrs_wor``.
UnsupportedMethodError
    If ``rule`` is not a tree rule.""",
}


def _section(title: str, *names: str) -> str:
    return "\n".join([title, "-" * len(title), *(BLOCKS[n] for n in names)])


# Whole sections, for the rules whose entries are all shared (single-step rules on i.i.d. drafts).
BLOCKS["params_iid"] = _section("Parameters", "p_q", "drafts_iid", "validate")
BLOCKS["params_iid_sample"] = _section("Parameters", "p_q", "drafts_iid", "generator", "validate")
BLOCKS["returns_law_raises"] = _section("Returns", "returns_law") + "\n\n" + _section("Raises", "raises")
BLOCKS["returns_step_raises"] = _section("Returns", "returns_step") + "\n\n" + _section("Raises", "raises")
BLOCKS["returns_law_raises_inputs"] = _section("Returns", "returns_law") + "\n\n" + _section("Raises", "raises_inputs")
BLOCKS["returns_step_raises_inputs"] = _section("Returns", "returns_step") + "\n\n" + _section("Raises", "raises_inputs")


#: The ``drafts`` entry of each draft law (``drafts_iid`` above is the i.i.d. one).
_DRAFTS = {
    "one": "``[B, 1]`` long: one draft per row.",
    "any": "``[B, k]`` long drafts (any law).",
    "greedy": "``[B, k]`` long greedy drafts: the top-(k-1) tokens of q, then the random draft.",
    "distinct": "``[B, k]`` long distinct drafts (successive sampling without replacement).",
    "hub": "``[B, 2]`` long: the top token of q, then the draft from the rest (greedy, k = 2).",
}
for _law, _text in _DRAFTS.items():
    BLOCKS[f"drafts_{_law}"] = f"drafts : torch.Tensor\n    {_text}"
    BLOCKS[f"params_{_law}"] = _section("Parameters", "p_q", f"drafts_{_law}", "validate")
    BLOCKS[f"params_{_law}_sample"] = _section("Parameters", "p_q", f"drafts_{_law}", "generator", "validate")


# the pure-step split of a single-step rule: uniforms(p, q, drafts, generator), step(p, q, drafts, *uniforms)
BLOCKS["uniforms_doc"] = (
    _section("Parameters", "p_q", "drafts_any", "generator")
    + """

Returns
-------
tuple of torch.Tensor
    The uniforms of one ``sample`` call, in the order ``sample`` draws them (one ``rand`` call each)."""
)
BLOCKS["coins_u"] = """coins : torch.Tensor
    ``[B, R]`` float64 accept coins (``R`` rounds), from the module's ``uniforms``.
u : torch.Tensor
    ``[B]`` float64 residual uniforms, from the module's ``uniforms``."""
BLOCKS["step_head"] = _section("Parameters", "p_q", "drafts_any")
BLOCKS["step_returns"] = _section("Returns", "returns_step")
BLOCKS["pure_step"] = """No generator, no validation, no host synchronisation on CUDA: :func:`sample` is the checks,
:func:`uniforms`, then this."""
# the whole numpydoc part of a ``step`` with only ``coins`` and ``u`` after the inputs
BLOCKS["step_doc"] = BLOCKS["step_head"] + "\n" + BLOCKS["coins_u"] + "\n\n" + BLOCKS["step_returns"]

BLOCKS["chain_law"] = """torch.Tensor
    ``[B, gamma + 1, V]``: ``law[b, t, y]`` :math:`= P(\\tau = t, Y = y \\mid \\text{row } b)`, in ``p``'s dtype."""
BLOCKS["chain_step"] = """StepOutput
    ``accepted`` ``[B]`` in ``0..gamma``, ``token`` ``[B]`` (correction or bonus) and ``index`` ``[B]`` (0)."""
BLOCKS["chain_conditional_doc"] = (
    _section("Parameters", "chain_inputs", "chain_validate")
    + "\n\n"
    + _section("Returns", "chain_law")
    + "\n\n"
    + _section("Raises", "chain_raises")
)
BLOCKS["chain_sample_doc"] = (
    _section("Parameters", "chain_inputs", "generator", "chain_validate")
    + "\n\n"
    + _section("Returns", "chain_step")
    + "\n\n"
    + _section("Raises", "chain_raises")
)

BLOCKS["tree_params"] = _section("Parameters", "tree_inputs", "tree_validate")
BLOCKS["tree_params_sample"] = _section("Parameters", "tree_inputs", "generator", "tree_validate")
BLOCKS["tree_raises_section"] = _section("Raises", "tree_raises")


#: Fills the placeholders of the torch verifiers' docstrings from :data:`BLOCKS` (the core's
#: :func:`otspec.plugin.filler`: one implementation of the template for both packages).
fill_doc = filler(BLOCKS)
