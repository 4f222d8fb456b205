"""The GRPO step for Luna (``duet train luna-grpo``): rollouts, rewards and the clipped-surrogate update, as a
``duet.train.runner.StepRunner`` on the skeleton every duet run shares (resume, seeding, checkpoints, metrics).

One optimizer step (``GRPOTrainer.step``)::

    P prompts, the next in a seeded order of the prompt set (a pure function of (seed, epoch): exact resume)
    for each: G candidates decoded in one batch by the current model with the run's DecodeConfig, each trajectory
              recorded (``duet.luna.trajectory``); the grids -> audio by the codec -> scorer (WER, SIM:
              ``duet.metrics.clip``)
    rewards: lexicographic, prompt-local (``duet.train.rewards``); advantages per group; groups without preference
             skipped (counted in ``groups_skipped``)
    ppo_epochs times: zero grads; for each kept group a step-by-step replay back-propagates its share of the loss
             (``duet.train.objectives.luna_grpo.grpo_loss`` with |B| = the kept trajectories of the step); clip;
             non-finite guard; AdamW step
    (a step whose groups are all skipped makes no update)

The policy runs in eval mode throughout (rollout and replay), so the replay's forward is the rollout's: with
unchanged weights every ratio is 1. Only the acoustic model trains; the duration predictor sets T and stays as it
came. Validation decodes each held-out prompt once with a fixed seed per prompt and reports its mean WER (the
best-checkpoint key) and SIM.

Shape legend: G candidates, S text tokens, T frames, Q codebooks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from duet.errors import DuetError
from duet.luna.bundle import LunaBundle
from duet.luna.decode import DecodeConfig, maskgit_decode
from duet.luna.duration import fit_durations, total_frames
from duet.luna.grid import codes_from_grid
from duet.luna.model import LunaInputs, LunaModel
from duet.luna.trajectory import Trajectory, TrajectoryRecorder
from duet.metrics.clip import ClipScore, ClipScoring
from duet.text.prompts import luna_prompt
from duet.train.loop import LoopConfig, build_optimizer
from duet.train.objectives.luna_grpo import GRPOConfig, GRPOLoss, group_advantages, grpo_loss
from duet.train.rewards import lexicographic_rewards
from duet.train.runner import StepOutput, StepRunner
from duet.train.schedule import warmup_cosine


@dataclass(frozen=True)
class GRPOPrompt:
    text: str  # what the model speaks; Whisper's transcript is scored against it
    reference: Path | None = None  # a recording of the voice to match (SIM); None: WER alone
    language: str = "en"
    emotion: str | None = None  # the utterance's emotion token in the instruction context (an expressive corpus)


@dataclass(frozen=True)
class GRPOStepConfig:
    group_size: int = 4  # G >= 2 candidates per prompt (§4.1)
    prompts_per_step: int = 2  # P groups per optimizer step
    ppo_epochs: int = 1  # optimizer updates per rollout (the first has ratio 1); the report gives none
    wer_tie: float = 0.0  # WERs this close count as equal (SIM decides): duet.train.rewards
    max_frames: int = 400  # longest grid a rollout decodes (16 s at 25 Hz)
    grpo: GRPOConfig = GRPOConfig()

    def __post_init__(self) -> None:
        if self.group_size < 2:
            raise DuetError(f"GRPO needs G >= 2 candidates per prompt, got {self.group_size}")
        if self.prompts_per_step < 1 or self.ppo_epochs < 1 or self.max_frames < 1:
            raise DuetError("prompts_per_step, ppo_epochs and max_frames must be at least 1")


@dataclass(frozen=True)
class Group:
    """One prompt's G rollouts."""

    prompt: GRPOPrompt
    inputs: LunaInputs  # G rows of the same condition
    trajectory: Trajectory  # G recorded decodes
    scores: list[ClipScore]


def prompt_inputs(bundle: LunaBundle, tokenizer: Any, prompt: GRPOPrompt, rows: int, max_frames: int) -> LunaInputs:
    """``rows`` copies of a prompt's condition with an all-mask grid of the duration predictor's length T (capped at
    ``max_frames`` and at the positions the model has); an aligned model's layout is scaled to T (as
    ``duet.tts.luna_parts.LunaParts.layout`` lays it)."""
    acoustic = bundle.acoustic
    device = acoustic.device
    ids = luna_prompt(prompt.text, tokenizer, language=prompt.language, emotion=prompt.emotion)
    text = torch.tensor([ids], dtype=torch.long, device=device)  # (1, S)
    lengths = torch.tensor([len(ids)], device=device)  # (1,)
    with torch.no_grad():
        d = bundle.duration.token_durations(text, lengths)  # (1, S)
    room = acoustic.config.backbone.max_positions - len(ids)
    frames = max(1, min(int(total_frames(d, lengths)[0]), max_frames, room))
    Q, mask_id = acoustic.config.num_codebooks, acoustic.config.mask_id
    durations = fit_durations(d[0], frames)[None].repeat(rows, 1) if acoustic.config.is_aligned else None  # (G, S)
    return LunaInputs(text_ids=text.repeat(rows, 1), text_lengths=lengths.repeat(rows),
                      target=torch.full((rows, frames, Q), mask_id, dtype=torch.long, device=device),
                      target_lengths=torch.full((rows,), frames, device=device), durations=durations)


@torch.no_grad()
def rollout(bundle: LunaBundle, tokenizer: Any, codec: Any, scorer: ClipScoring, prompt: GRPOPrompt,
            decode: DecodeConfig, group_size: int, max_frames: int, generator: torch.Generator) -> Group:
    """G candidates of one prompt, decoded in one batch with their trajectories recorded, then heard and scored."""
    model = bundle.acoustic
    inputs = prompt_inputs(bundle, tokenizer, prompt, group_size, max_frames)
    recorder = TrajectoryRecorder(model.config.mask_id)
    maskgit_decode(model.logits_fn(inputs), inputs.target, model.config.mask_id, decode, generator=generator,
                   recorder=recorder)
    traj = recorder.trajectory()
    codes = torch.stack([codes_from_grid(model.config, grid) for grid in traj.tokens])  # (G, T, Q) -> (G, Q_c, T)
    audio = codec.decode(codes.to(traj.tokens.device)).audio  # (G, samples)
    scores = [scorer.score(audio[g].float().cpu().numpy(), codec.sample_rate, prompt.text, prompt.reference)
              for g in range(group_size)]
    return Group(prompt, inputs, traj, scores)


def backward_groups(model: LunaModel, groups: Sequence[Group], advantages: torch.Tensor, kept: torch.Tensor,
                    cfg: GRPOConfig, reference: LunaModel | None = None) -> list[GRPOLoss]:
    """Back-propagate one mini-batch's GRPO loss: the kept groups' trajectories (advantages (P, G), kept (P,)), each
    replayed step by step, normalised by |B| = the kept trajectories. Skipped groups are not replayed: they add
    nothing to the loss and do not count in |B|."""
    normalizer = sum(groups[p].trajectory.batch_size for p in range(len(groups)) if kept[p])
    return [grpo_loss(model, g.inputs, g.trajectory, advantages[p], cfg, normalizer=normalizer, reference=reference,
                      backward=True) for p, g in enumerate(groups) if kept[p]]


def prompt_order(num_prompts: int, seed: int, epoch: int) -> list[int]:
    """The prompt indices of one epoch: a permutation seeded by (seed, epoch)."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(num_prompts, generator=g).tolist()


class GRPOTrainer(StepRunner):
    """Owns the bundle being trained, the frozen reference policy (KL term, when used), the codec, the scorer, the
    prompt sets, the optimizer and the rollout generator."""

    name = "luna-grpo"
    val_key = "val_wer"

    def __init__(self, bundle: LunaBundle, tokenizer: Any, codec: Any, scorer: ClipScoring,
                 prompts: Sequence[GRPOPrompt], decode: DecodeConfig, step_cfg: GRPOStepConfig, loop: LoopConfig, *,
                 val_prompts: Sequence[GRPOPrompt] = (), reference: LunaModel | None = None):
        if not prompts:
            raise DuetError("GRPO needs at least one training prompt")
        if decode.temperature == 0:
            raise DuetError("GRPO needs a stochastic policy: temperature > 0 (at 0 every candidate is the argmax)")
        self.bundle, self.tokenizer, self.codec, self.scorer = bundle, tokenizer, codec, scorer
        self.prompts, self.val_prompts = list(prompts), list(val_prompts)
        self.decode, self.cfg, self.loop = decode, step_cfg, loop
        self.reference = reference
        bundle.duration.requires_grad_(False)  # T comes from the predictor as shipped; only the acoustic model learns
        bundle.eval()  # the policy of the rollout is the policy of the replay (no dropout noise between them)
        self.optimizer = build_optimizer(bundle, loop)
        self.rollout_generator = torch.Generator()
        self.epoch, self.prompts_done = 0, 0

    def modules(self) -> dict[str, nn.Module]:
        return {"model": self.bundle}

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"optimizer": self.optimizer}

    def generators(self) -> dict[str, torch.Generator]:
        return {"rollout": self.rollout_generator}

    def position(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "prompts_done": self.prompts_done}

    def restore(self, ckpt: Path) -> dict[str, Any]:
        state = super().restore(ckpt)
        self.epoch, self.prompts_done = state["extra"]["epoch"], state["extra"]["prompts_done"]
        self.bundle.eval()
        return state

    def next_prompts(self) -> list[GRPOPrompt]:
        """The step's P prompts, continuing the current epoch's order (and the next epoch's when it runs out)."""
        chosen = []
        while len(chosen) < self.cfg.prompts_per_step:
            order = prompt_order(len(self.prompts), self.loop.seed, self.epoch)
            if self.prompts_done >= len(order):
                self.epoch, self.prompts_done = self.epoch + 1, 0
                continue
            chosen.append(self.prompts[order[self.prompts_done]])
            self.prompts_done += 1
        return chosen

    def step(self, step: int) -> StepOutput:
        loop, cfg = self.loop, self.cfg
        lr = warmup_cosine(step, loop.lr, loop.warmup_steps, loop.max_steps, loop.final_lr_ratio)
        for group in self.optimizer.param_groups:
            group["lr"] = lr * group["lr_mult"]
        groups = [rollout(self.bundle, self.tokenizer, self.codec, self.scorer, p, self.decode, cfg.group_size,
                          cfg.max_frames, self.rollout_generator) for p in self.next_prompts()]
        rewards = torch.tensor([lexicographic_rewards(g.scores, cfg.wer_tie) for g in groups])  # (P, G)
        advantages, kept = group_advantages(rewards)  # (P, G), (P,)
        metrics: dict[str, float] = {
            "wer": float(np.mean([s.wer for g in groups for s in g.scores])),
            "groups_kept": float(kept.sum()),
            "groups_skipped": float((~kept).sum()),
        }
        sims = [s.sim for g in groups for s in g.scores if s.sim is not None]
        if sims:
            metrics["sim"] = float(np.mean(sims))
        grad_norm, skipped = 0.0, False
        totals = {"loss": 0.0, "surrogate": 0.0, "kl": 0.0, "ratio": 0.0, "clip_fraction": 0.0, "out_of_domain": 0.0}
        if bool(kept.any()):
            for _ in range(cfg.ppo_epochs):
                self.optimizer.zero_grad(set_to_none=True)
                parts = backward_groups(self.bundle.acoustic, groups, advantages, kept, cfg.grpo, self.reference)
                loss = sum(float(x.loss) for x in parts)
                max_norm = loop.grad_clip if loop.grad_clip > 0 else math.inf
                grad_norm = float(torch.nn.utils.clip_grad_norm_(self.bundle.parameters(), max_norm))
                skipped = not (math.isfinite(loss) and math.isfinite(grad_norm))
                if skipped:  # the non-finite guard: no update
                    self.optimizer.zero_grad(set_to_none=True)
                    break
                self.optimizer.step()
                in_domain = max(1, sum(x.actions - x.out_of_domain for x in parts))
                totals["loss"] += loss / cfg.ppo_epochs
                totals["surrogate"] += sum(x.surrogate for x in parts) / cfg.ppo_epochs
                totals["kl"] += sum(x.kl for x in parts) / cfg.ppo_epochs
                for key, value in (("ratio", lambda x: x.ratio_mean), ("clip_fraction", lambda x: x.clip_fraction)):
                    share = sum(value(x) * (x.actions - x.out_of_domain) for x in parts) / in_domain
                    totals[key] += share / cfg.ppo_epochs
                totals["out_of_domain"] += sum(x.out_of_domain for x in parts) / cfg.ppo_epochs
        metrics.update(totals)
        return StepOutput(metrics=metrics, lr=lr, grad_norm=grad_norm, skipped=skipped, info={"epoch": self.epoch})

    @torch.no_grad()
    def validate(self) -> dict[str, float]:
        """Mean WER (and SIM where measured) of one candidate per held-out prompt, each with its own fixed seed."""
        if not self.val_prompts:
            return {}
        scores = []
        for i, prompt in enumerate(self.val_prompts):
            g = torch.Generator().manual_seed(self.loop.seed + i)
            group = rollout(self.bundle, self.tokenizer, self.codec, self.scorer, prompt, self.decode, 1,
                            self.cfg.max_frames, g)
            scores.extend(group.scores)
        out = {"val_wer": float(np.mean([s.wer for s in scores]))}
        sims = [s.sim for s in scores if s.sim is not None]
        if sims:
            out["val_sim"] = float(np.mean(sims))
        return out

