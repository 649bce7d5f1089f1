r"""The verifier step of a decoding round: (p, q, drafts) to accepted tokens and one next token.

One interface for the three decoding modes: :class:`VerifierStep` maps the round's target
conditionals ``P`` ``[R, gamma + 1, V]``, draft conditionals ``Q`` ``[R, gamma, V]`` and drafts
``X`` ``[R, gamma]`` (``R = B k`` rows, prompt ``b`` owns rows ``b k .. b k + k - 1``) to a
:class:`otspec_gpu.verifiers.StepOutput` (the one output type of every torch rule): per prompt
``accepted`` (the number :math:`\tau` of drafted tokens kept), ``token`` (the next token: correction
or bonus) and ``index`` (the draft row followed, within the prompt's ``k`` rows).

* chains (``token``, ``block``): :mod:`otspec_gpu.verifiers.chain`;
* single-step verifiers (``gamma = 1``): the verifier outputs :math:`Y \sim p(\cdot \mid
  \text{context})`; when :math:`Y` equals a draft, the target row of that draft already holds
  :math:`p(\cdot \mid \text{context}, Y)`, from which a bonus token is drawn (the bonus stream);
* trees (``kseq``, ``rrs``, ``rrs_wor``): :func:`otspec_gpu.verifiers.tree.sample`.
"""

from __future__ import annotations

import torch

from otspec_gpu.verifiers.base import StepOutput

__all__ = ["VerifierStep", "last_token_rule"]


class VerifierStep:
    """The verifier of one decoding mode, called once per round.

    A prompt with fewer real drafts than ``k`` (a short support, see
    :class:`otspec_gpu.drafting.ModelDrafter`) is verified with the law its drafts actually came from:
    the same rule with ``n`` drafts, or -- when the rule takes no ``n`` drafts (``spechub`` needs
    exactly 2) -- the ``token`` rule with the single draft (``n = 1``: q is a point mass).

    Parameters
    ----------
    mode : str
        ``"chain"``, ``"single"`` or ``"tree"``.
    rule : str
        The rule: ``token``/``block`` (chain), a single-step verifier name, or ``kseq``/``rrs``/``rrs_wor``.
    B : int
        Prompts in the batch.
    k : int
        Drafts per prompt.
    graphs : otspec_gpu.graphs.VerifyGraphs, optional
        Replay the verify step (chain, single-step or tree) from CUDA graphs (on CUDA;
        ``validate=False``); default :func:`otspec_gpu.graphs.default_graphs` (on with
        ``OTSPEC_CUDA_GRAPHS=1``).
    compile_steps : bool, optional
        Run the single-step rules of :data:`otspec_gpu.compiled.COMPILABLE` through their
        ``torch.compile``-d pure step; default :func:`otspec_gpu.compiled.default_compile` (on with
        ``OTSPEC_COMPILE=1``).
    """

    def __init__(self, mode: str, rule: str, B: int, k: int, graphs=None, compile_steps: bool | None = None):
        from otspec_gpu.compiled import default_compile
        from otspec_gpu.graphs import default_graphs

        self.mode, self.rule, self.B, self.k = mode, rule, B, k
        self.graphs = default_graphs() if graphs is None else graphs
        self.compile_steps = default_compile() if compile_steps is None else bool(compile_steps)

    def rule_for(self, n: int) -> str:
        """The rule that verifies ``n`` real drafts (the mode's rule unless it cannot take ``n``).

        Parameters
        ----------
        n : int
            Real drafts of a prompt, ``1 <= n <= k``.

        Returns
        -------
        str
            A rule name of this mode.
        """
        if self.mode != "single" or n == self.k:
            return self.rule
        from otspec_gpu.verifiers import VERIFIERS

        v = VERIFIERS[self.rule].single_step
        return self.rule if v.k_min <= n and (v.k_max is None or n <= v.k_max) else "token"

    def __call__(self, P, Q, X, n_drafts, verify: torch.Generator, bonus: torch.Generator) -> StepOutput:
        """Verify one round.

        Parameters
        ----------
        P : torch.Tensor
            ``[R, gamma + 1, V]`` target conditionals.
        Q : torch.Tensor
            ``[R, gamma, V]`` draft conditionals.
        X : torch.Tensor
            ``[R, gamma]`` drafts.
        n_drafts : torch.Tensor
            ``[B]`` real drafts per prompt (``k`` but for short supports).
        verify : torch.Generator
            The verification stream (accept coins, residual draws).
        bonus : torch.Generator
            The bonus stream (single-step rounds only).

        Returns
        -------
        otspec_gpu.verifiers.StepOutput
            Per prompt: ``accepted`` (:math:`\tau`), ``token`` (the next token to emit after the
            kept drafts, bonus included) and ``index`` (the row followed).
        """
        if self.mode == "chain":
            from otspec_gpu.verifiers import VERIFIERS

            if self.graphs is not None and P.is_cuda:  # captured once per shape, then replayed
                return self.graphs(self.rule, VERIFIERS[self.rule].chain.sample, P, Q, X, generator=verify)
            return VERIFIERS[self.rule].chain.sample(P, Q, X, generator=verify)
        B, k, V = self.B, self.k, P.shape[-1]
        g = X.shape[1]
        P4, Q4, X3 = P.view(B, k, g + 1, V), Q.view(B, k, g, V), X.view(B, k, g)
        sizes = sorted(set(n_drafts.tolist()))
        if sizes == [k]:
            out = self._verify(P4, Q4, X3, k, verify)
        else:  # short supports: one call per number of real drafts
            acc = torch.zeros(B, dtype=torch.long, device=P.device)
            tok, idx = torch.zeros_like(acc), torch.zeros_like(acc)
            for n in sizes:
                rows = torch.nonzero(n_drafts == n, as_tuple=True)[0]
                part = self._verify(P4[rows, :n], Q4[rows, :n], X3[rows, :n], n, verify)
                acc[rows], tok[rows], idx[rows] = part.accepted.long(), part.token.long(), part.index.long()
            out = StepOutput(accepted=acc, token=tok, index=idx)
        if self.mode == "tree":
            return out
        from otspec_gpu.sampling import categorical

        accepted = out.accepted.bool()
        path = out.index.clamp_min(0).long()
        extra = categorical(P4[torch.arange(B, device=P.device), path, 1], bonus)
        return StepOutput(accepted=accepted.long(), token=torch.where(accepted, extra, out.token.long()), index=path)

    def _verify(self, P4, Q4, X3, n: int, verify: torch.Generator) -> StepOutput:
        """The rule for ``n`` drafts on ``[b, n, ...]`` rows (tree: the whole tree; single: the first
        position), replayed from a CUDA graph when the step has a graph cache."""
        graphed = self.graphs is not None and P4.is_cuda  # captured once per shape, then replayed
        if self.mode == "tree":
            from otspec_gpu.verifiers import tree

            if graphed:
                return self.graphs(f"tree:{self.rule}", tree.sample, P4, Q4, X3, generator=verify, rule=self.rule)
            return tree.sample(P4, Q4, X3, rule=self.rule, generator=verify)
        from otspec_gpu.compiled import COMPILABLE, compiled_sample
        from otspec_gpu.verifiers import VERIFIERS

        name = self.rule_for(n)
        v = VERIFIERS[name].single_step
        sample = compiled_sample(v) if self.compile_steps and name in COMPILABLE else v.sample
        args = (P4[:, 0, 0], Q4[:, 0, 0], X3[:, :, 0])
        if graphed:
            return self.graphs(f"single:{name}:{'compiled' if sample is not v.sample else 'eager'}", sample, *args, generator=verify)
        return sample(*args, generator=verify)


def last_token_rule(p: torch.Tensor, q: torch.Tensor, x: torch.Tensor, accept: torch.Generator, residual: torch.Generator):
    r"""The exact token rule on one drafted token per row, with its own accept and residual streams.

    Row ``r`` keeps ``x[r]`` with probability :math:`\min(1, p(x)/q(x))`; its replacement is a draw
    from :math:`\mathrm{norm}((p - q)_+)` (drawn for every row, used where the token is rejected).
    SPRINTER checks the last token of each drafted run this way.

    Parameters
    ----------
    p, q : torch.Tensor
        ``[R, V]`` float64 target and draft conditionals at the drafted position.
    x : torch.Tensor
        ``[R]`` long drafted tokens.
    accept : torch.Generator
        Stream of the accept coins (one uniform per row).
    residual : torch.Generator
        Stream of the residual draws (one uniform per row).

    Returns
    -------
    (list of bool, list of int)
        Per row, whether ``x`` is kept, and the residual token.
    """
    from otspec_gpu.sampling import categorical

    px, qx = p.gather(1, x[:, None]).squeeze(1), q.gather(1, x[:, None]).squeeze(1)
    u = torch.rand(x.shape[0], dtype=torch.float64, generator=accept)
    kept = (u * qx < px).tolist()  # u < min(1, p/q) without dividing
    res = (p - q).clamp_min(0.0)
    s = res.sum(-1, keepdim=True)
    res = torch.where(s > 0, res / s.clamp_min(1e-300), p)  # 0/0 only on a probability-0 event
    return kept, categorical(res, residual).tolist()
