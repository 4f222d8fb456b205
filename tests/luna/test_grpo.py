"""GRPO over denoising trajectories on a micro Luna: recording, the effective-policy log-probability against a naive
cell-by-cell recomputation, the clipped surrogate, group-relative advantages and lexicographic rewards against naive
loops, skipped groups, and the step-by-step backward."""

from __future__ import annotations

import math
import statistics
from dataclasses import replace

import pytest
import torch

from duet.errors import DuetError
from duet.luna.decode import DecodeConfig, guidance_rows, maskgit_decode
from duet.luna.model import LunaInputs, LunaModel, condition_rows
from duet.luna.trajectory import TrajectoryRecorder
from duet.metrics.clip import ClipScore
from duet.train.objectives.luna_grpo import (
    GRPOConfig,
    clipped_surrogate,
    group_advantages,
    grpo_loss,
    kl_k3,
    replay,
)
from duet.train.rewards import lexicographic_rewards


def scored(wer: float, sim: float | None = None) -> ClipScore:
    return ClipScore(wer=wer, sim=sim)

POLICIES = [
    DecodeConfig(steps=4, temperature=1.0, top_k=0, cfg_scale=2.0),
    DecodeConfig(steps=5, temperature=0.7, top_k=5, cfg_scale=1.0),
    DecodeConfig(steps=3, temperature=1.3, top_k=3, cfg_scale=1.5),
]


def _model(make_config, seed: int = 0) -> LunaModel:
    torch.manual_seed(seed)
    return LunaModel(make_config(q=2, k=16)).eval()


def _inputs(model: LunaModel, seed: int = 1) -> LunaInputs:
    """Three rows: ragged text, a clean prompt in one, ragged target lengths; targets all mask."""
    g = torch.Generator().manual_seed(seed)
    cfg = model.config
    Q, K, V = cfg.num_codebooks, cfg.codebook_size, cfg.backbone.vocab_size
    target_lengths = torch.tensor([6, 4, 5])
    return LunaInputs(text_ids=torch.randint(0, V, (3, 5), generator=g), text_lengths=torch.tensor([5, 3, 4]),
                      target=torch.full((3, 6, Q), cfg.mask_id), target_lengths=target_lengths,
                      prompt=torch.randint(0, K, (3, 2, Q), generator=g), prompt_lengths=torch.tensor([2, 0, 1]))


def _decode(model, inputs, policy, seed=7, recorder=None):
    return maskgit_decode(model.logits_fn(inputs), inputs.target, model.config.mask_id, policy,
                          frame_lengths=inputs.target_lengths, generator=torch.Generator().manual_seed(seed),
                          recorder=recorder)


def _record(model, inputs, policy, seed=7):
    recorder = TrajectoryRecorder(model.config.mask_id)
    out = _decode(model, inputs, policy, seed, recorder)
    return out, recorder.trajectory()


def _naive_log_prob(lc: list[float], lu: list[float], code: int, policy: DecodeConfig) -> float:
    """log pi(code) of one cell by hand: CFG, top-k (keep logits >= the k-th largest), temperature, log-softmax."""
    w = policy.cfg_scale
    guided = [u + w * (c - u) for c, u in zip(lc, lu)] if w != 1.0 else list(lc)
    if 0 < policy.top_k < len(guided):
        kth = sorted(guided, reverse=True)[policy.top_k - 1]
        kept = [x >= kth for x in guided]
    else:
        kept = [True] * len(guided)
    if not kept[code]:
        return -math.inf
    z = [x / policy.temperature for x, k in zip(guided, kept) if k]
    top = max(z)
    return guided[code] / policy.temperature - (top + math.log(sum(math.exp(x - top) for x in z)))


def _naive_trajectory_log_probs(model, inputs, traj) -> dict[tuple[int, int, int], float]:
    """For every committed cell: rebuild the state before its step from the final grid and the commit steps, run the
    production logits_fn (conditional and unconditional rows), and compute log pi by hand."""
    policy, mask = traj.policy, model.config.mask_id
    B, T, Q = traj.tokens.shape
    fn = model.logits_fn(inputs)
    out = {}
    for k in range(1, policy.steps + 1):
        state = traj.tokens.clone()
        for b in range(B):
            for t in range(T):
                for q in range(Q):
                    if int(traj.commit_step[b, t, q]) >= k:
                        state[b, t, q] = mask
        conditional = guidance_rows(B, policy)
        logits = fn(state.repeat(conditional.shape[0] // B, 1, 1), conditional)
        for b in range(B):
            for t in range(T):
                for q in range(Q):
                    if int(traj.commit_step[b, t, q]) != k:
                        continue
                    lc = logits[b, t, q].tolist()
                    lu = logits[B + b, t, q].tolist() if policy.cfg_scale != 1.0 else lc
                    out[(b, t, q)] = _naive_log_prob(lc, lu, int(traj.tokens[b, t, q]), policy)
    return out


@pytest.mark.parametrize("policy", POLICIES)
def test_recording_leaves_decoding_unchanged(make_config, policy):
    model = _model(make_config)
    inputs = _inputs(model)
    plain = _decode(model, inputs, policy)
    recorded, traj = _record(model, inputs, policy)
    assert torch.equal(plain.tokens, recorded.tokens) and torch.equal(plain.commit_step, recorded.commit_step)
    assert torch.equal(traj.tokens, plain.tokens) and torch.equal(traj.commit_step, plain.commit_step)
    assert traj.policy == policy


def test_trajectory_holds_the_masked_sets_and_states_the_model_saw(make_config):
    model = _model(make_config)
    inputs = _inputs(model)
    policy = POLICIES[0]
    seen = []
    fn = model.logits_fn(inputs)

    def spy(tokens, conditional):
        seen.append(tokens[: inputs.batch_size].clone())
        return fn(tokens, conditional)

    recorder = TrajectoryRecorder(model.config.mask_id)
    maskgit_decode(spy, inputs.target, model.config.mask_id, policy, frame_lengths=inputs.target_lengths,
                   generator=torch.Generator().manual_seed(7), recorder=recorder)
    traj = recorder.trajectory()
    real = torch.arange(6)[None, :, None] < inputs.target_lengths[:, None, None]  # (B, T, 1)
    assert torch.equal(traj.masked_before(1), real.expand_as(traj.tokens))  # M_1: every cell to generate
    assert torch.equal(traj.actions(), traj.masked_before(1))  # each generated cell is one action, once
    assert traj.num_actions().tolist() == [12, 8, 10]
    for k in range(1, policy.steps + 1):
        assert torch.equal(traj.state_before(k), seen[k - 1])  # the grid the model was given at step k
        assert torch.equal(traj.masked_before(k) & ~traj.masked_before(k + 1), traj.committed_at(k))
    assert not traj.masked_before(policy.steps + 1).any()


@pytest.mark.parametrize("policy", POLICIES)
def test_effective_log_prob_equals_a_naive_recomputation(make_config, policy):
    """Both the rollout's recorded log pi_old and the differentiable replay equal a cell-by-cell recomputation."""
    model = _model(make_config)
    inputs = _inputs(model)
    _, traj = _record(model, inputs, policy)
    naive = _naive_trajectory_log_probs(model, inputs, traj)
    assert len(naive) == int(traj.num_actions().sum())
    replayed = replay(model, inputs, traj)
    assert replayed.requires_grad
    replayed = replayed.detach()
    for (b, t, q), want in naive.items():
        assert math.isfinite(want)  # the sampled token lies in its own top-k set
        assert float(traj.old_log_probs[b, t, q]) == pytest.approx(want, abs=1e-5)
        assert float(replayed[b, t, q]) == pytest.approx(want, abs=1e-5)
    outside = ~traj.actions()
    assert not traj.old_log_probs[outside].any() and not replayed[outside].any()


def test_condition_rows_repeat_each_condition_and_drop_text_only_where_unconditional(make_config):
    model = _model(make_config)
    inputs = _inputs(model)
    tokens = torch.randint(0, 17, (6, 6, 2), generator=torch.Generator().manual_seed(3))
    conditional = guidance_rows(3, POLICIES[0])
    rows = condition_rows(inputs, tokens, conditional)
    prompt, prompt_lengths = inputs.prompt_or_empty()
    for i in range(tokens.shape[0]):
        b = i % inputs.batch_size
        assert torch.equal(rows.text_ids[i], inputs.text_ids[b])
        assert int(rows.text_lengths[i]) == (int(inputs.text_lengths[b]) if conditional[i] else 0)
        assert torch.equal(rows.target[i], tokens[i])
        assert int(rows.target_lengths[i]) == int(inputs.target_lengths[b])
        assert torch.equal(rows.prompt[i], prompt[b]) and int(rows.prompt_lengths[i]) == int(prompt_lengths[b])
    with pytest.raises(DuetError):
        condition_rows(inputs, tokens[:5], conditional[:5])


def _naive_surrogate(new, old, adv, valid, eps):
    B, T, Q = new.shape
    out = torch.zeros(B, T, Q, dtype=torch.float64)
    for b in range(B):
        for t in range(T):
            for q in range(Q):
                if valid[b, t, q]:
                    r = math.exp(float(new[b, t, q]) - float(old[b, t, q]))
                    a = float(adv[b])
                    out[b, t, q] = min(r * a, min(max(r, 1 - eps), 1 + eps) * a)
    return out


def test_clipped_surrogate_against_naive_loops():
    g = torch.Generator().manual_seed(0)
    new = torch.randn(4, 5, 3, generator=g) * 0.5 - 2
    old = new + torch.randn(4, 5, 3, generator=g) * 0.4
    new[0, 0, 0] = float("-inf")  # a token outside the new top-k set: not in the domain
    valid = (torch.rand(4, 5, 3, generator=g) < 0.8) & torch.isfinite(new)
    adv = torch.tensor([1.2, -0.7, 0.0, -1.5])
    term, ratio = clipped_surrogate(new, old, adv, valid, 0.2)
    torch.testing.assert_close(term.double(), _naive_surrogate(new, old, adv, valid, 0.2), atol=1e-6, rtol=1e-6)
    assert torch.isfinite(term).all() and torch.equal(ratio[~valid], torch.ones(int((~valid).sum())))


def test_kl_k3_against_naive_and_zero_at_equal_policies():
    g = torch.Generator().manual_seed(1)
    new, ref = torch.randn(2, 3, 2, generator=g) - 1, torch.randn(2, 3, 2, generator=g) - 1
    valid = torch.ones(2, 3, 2, dtype=torch.bool)
    got = kl_k3(new, ref, valid)
    for idx in torch.cartesian_prod(torch.arange(2), torch.arange(3), torch.arange(2)).tolist():
        r = float(ref[tuple(idx)] - new[tuple(idx)])
        assert float(got[tuple(idx)]) == pytest.approx(math.exp(r) - r - 1, rel=1e-6, abs=1e-6)
    assert (got >= 0).all() and not kl_k3(new, new, valid).any()


def test_group_advantages_against_naive_loops_and_skip_groups_without_signal():
    rewards = torch.tensor([[1.0, -1.0, 0.0, 0.0], [2.0, 2.0, 2.0, 2.0], [3.0, 1.0, -1.0, -3.0]])
    adv, kept = group_advantages(rewards)
    assert kept.tolist() == [True, False, True]
    for p, row in enumerate(rewards.tolist()):
        if not kept[p]:
            assert not adv[p].any()
            continue
        mean, std = statistics.fmean(row), statistics.stdev(row)  # the sample standard deviation
        assert adv[p].tolist() == pytest.approx([(r - mean) / std for r in row], abs=1e-6)
    with pytest.raises(DuetError):
        group_advantages(torch.tensor([[1.0]]))  # G >= 2


def test_lexicographic_rewards_wer_first_then_sim():
    s = [scored(0.2, 0.9), scored(0.1, 0.1), scored(0.2, 0.5), scored(0.5, 0.99)]
    assert lexicographic_rewards(s) == [1.0, 3.0, -1.0, -3.0]  # order 1 > 0 > 2 > 3
    # Without references SIM is absent: equal WERs tie; a measured SIM beats a missing one.
    assert lexicographic_rewards([scored(0.3), scored(0.3), scored(0.0)]) == [-1.0, -1.0, 2.0]
    assert lexicographic_rewards([scored(0.3, 0.2), scored(0.3, None)]) == [1.0, -1.0]
    # All equal: no preference, so the group is skipped.
    flat = lexicographic_rewards([scored(1.0, 0.4)] * 3)
    assert not group_advantages(torch.tensor([flat]))[1].any()
    # Within wer_tie the WERs count as equal and SIM decides.
    assert lexicographic_rewards([scored(0.30, 0.1), scored(0.31, 0.9)], wer_tie=0.02) == [-1.0, 1.0]


def test_net_wins_give_the_rank_advantages_of_a_strict_order():
    g = torch.Generator().manual_seed(2)
    wer = torch.rand(6, generator=g).tolist()
    rewards = lexicographic_rewards([scored(w) for w in wer])
    rank = [float(sum(w < x for x in wer)) for w in wer]  # candidates it beats
    a, _ = group_advantages(torch.tensor([rewards]))
    b, _ = group_advantages(torch.tensor([rank]))
    torch.testing.assert_close(a, b)


def _perturbed(model: LunaModel, seed: int = 5, scale: float = 0.05) -> LunaModel:
    other = LunaModel(model.config).eval()
    other.load_state_dict(model.state_dict())
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(torch.randn(p.shape, generator=g) * scale)
    return other


@pytest.mark.parametrize("policy", POLICIES[:2])
def test_grpo_loss_against_naive_loops(make_config, policy):
    """Trajectories recorded under one model, the loss taken under a moved one (ratios away from 1): the loss equals
    -1/B sum_i 1/n_i sum_j min(rho A, clip(rho) A) computed cell by cell."""
    old = _model(make_config)
    inputs = _inputs(old)
    _, traj = _record(old, inputs, policy)
    new = _perturbed(old)
    adv = torch.tensor([1.1, -0.3, -0.8])
    cfg = GRPOConfig(clip_eps=0.1)
    got = grpo_loss(new, inputs, traj, adv, cfg)
    naive_new = _naive_trajectory_log_probs(new, inputs, traj)
    total = 0.0
    for b in range(3):
        cells = [(key, lp) for key, lp in naive_new.items() if key[0] == b]
        terms = []
        for key, lp in cells:
            if not math.isfinite(lp):
                continue  # outside the new policy's top-k: dropped, still counted in n_i
            r = math.exp(lp - float(traj.old_log_probs[key]))
            terms.append(min(r * float(adv[b]), min(max(r, 1 - 0.1), 1 + 0.1) * float(adv[b])))
        total += sum(terms) / len(cells)
    assert float(got.loss.detach()) == pytest.approx(-total / 3, abs=1e-5)
    assert got.surrogate == pytest.approx(total / 3, abs=1e-5)
    assert got.actions == len(naive_new)
    assert got.out_of_domain == sum(not math.isfinite(v) for v in naive_new.values())
    assert 0 < got.clip_fraction < 1 and got.ratio_mean != pytest.approx(1.0)


def test_unchanged_weights_give_ratio_one_and_the_policy_gradient(make_config):
    model = _model(make_config)
    inputs = _inputs(model)
    _, traj = _record(model, inputs, POLICIES[0])
    got = grpo_loss(model, inputs, traj, torch.tensor([1.0, -1.0, 0.5]))
    assert got.ratio_mean == pytest.approx(1.0, abs=1e-5) and got.clip_fraction == 0.0


def test_step_by_step_backward_equals_one_backward(make_config):
    old = _model(make_config)
    inputs = _inputs(old)
    _, traj = _record(old, inputs, POLICIES[1])
    adv = torch.tensor([0.9, -1.2, 0.3])
    cfg = GRPOConfig(clip_eps=0.2, kl_coef=0.1)
    grads = []
    for backward in (False, True):
        new = _perturbed(old)
        new.zero_grad()
        out = grpo_loss(new, inputs, traj, adv, cfg, reference=old, backward=backward)
        if not backward:
            out.loss.backward()
        else:
            assert not out.loss.requires_grad
        assert out.kl > 0
        grads.append({k: p.grad.clone() for k, p in new.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys() and grads[0]
    for k in grads[0]:
        torch.testing.assert_close(grads[0][k], grads[1][k], atol=1e-6, rtol=1e-5)


def test_a_split_mini_batch_adds_up_to_the_whole(make_config):
    """Rows passed in pieces with the mini-batch's |B| as normaliser give the loss of the whole batch."""
    old = _model(make_config)
    inputs = _inputs(old)
    _, traj = _record(old, inputs, POLICIES[0])
    new = _perturbed(old)
    adv = torch.tensor([0.5, -1.0, 0.7])
    whole = grpo_loss(new, inputs, traj, adv)
    parts = 0.0
    for rows in ([0], [1, 2]):
        sub = LunaInputs(inputs.text_ids[rows], inputs.text_lengths[rows], inputs.target[rows],
                         inputs.target_lengths[rows], inputs.prompt[rows], inputs.prompt_lengths[rows])
        parts += float(grpo_loss(new, sub, traj.rows(rows), adv[rows], normalizer=3).loss.detach())
    assert parts == pytest.approx(float(whole.loss.detach()), abs=1e-6)


def test_kl_needs_a_reference_and_bad_settings_are_refused(make_config):
    model = _model(make_config)
    inputs = _inputs(model)
    _, traj = _record(model, inputs, POLICIES[0])
    with pytest.raises(DuetError, match="reference"):
        grpo_loss(model, inputs, traj, torch.zeros(3), GRPOConfig(kl_coef=0.1))
    for bad in ({"clip_eps": 0.0}, {"clip_eps": 1.0}, {"kl_coef": -1.0}):
        with pytest.raises(DuetError):
            GRPOConfig(**bad)
    with pytest.raises(DuetError, match="nothing was recorded"):
        TrajectoryRecorder(16).trajectory()


def test_temperature_zero_is_a_point_mass(make_config):
    model = _model(make_config)
    inputs = _inputs(model)
    _, traj = _record(model, inputs, replace(POLICIES[0], temperature=0.0))
    assert not traj.old_log_probs.any()  # log 1 for every argmax action
