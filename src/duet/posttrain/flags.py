"""The flags of the post-training stages, free of torch (as ``duet.train.flags`` for the pretraining ones):
``gepard-sft`` and ``gepard-dpo`` (``duet.posttrain.gepard``), ``luna-grpo`` and ``luna-grpo-export``
(``duet.posttrain.luna``). Each ``add_*_stages`` binds its stages to the actions it is given: ``duet.posttrain.cli``
passes actions that import the stage's module when it runs, the module's own ``main`` its functions directly.
"""

from __future__ import annotations

from typing import Any

from duet.train.flags import GEPARD_PRESETS, Action, add_export_parser, add_train_parser

LUNA_GRPO = "luna-grpo"


def add_gepard_post_stages(subparsers: Any, sft: Action, dpo: Action) -> None:
    """``gepard-sft`` and ``gepard-dpo`` (their export is ``gepard-export``)."""
    start = "the shipped Gepard (name or directory) the stage starts from: weights and tokenizer"
    s = add_train_parser(subparsers, "gepard-sft", "fine-tune a Gepard on selected data at a lower LR", GEPARD_PRESETS,
                         "runs/gepard-sft", sft, tokenizer=False, init_from_help=start,
                         preset_help="whose pretraining recipe the defaults scale (default: the model's own)")
    s.add_argument("--select", default=None, metavar="IDS", help="a file of utterance ids to train on, one per line")
    s.add_argument("--speakers", default=None, help="comma-separated speakers to train on")

    p = subparsers.add_parser("gepard-dpo", help="distil two-pass CFG into a single-pass Gepard: CFG / no-CFG "
                                                 "pairs, Whisper scoring, DPO with LoRA (export: gepard-export)")
    p.add_argument("--init-from", default=None, help=start + " (omit with --resume)")
    p.add_argument("--out", required=True, help="run directory, e.g. runs/gepard-dpo")
    p.add_argument("--resume", action="store_true", help="continue the pairs, then the training")
    p.add_argument("--manifest", default=None, help="prompts: texts of this corpus manifest's --split")
    p.add_argument("--split", default="train")
    p.add_argument("--languages", default=None, help="comma-separated manifest languages to keep, e.g. en")
    p.add_argument("--hold-out-speakers", default=None, metavar="S1,S2",
                   help="manifest speakers never used as prompts (voices kept unseen for evaluation)")
    p.add_argument("--texts", default=None, help="prompts: a text file, one per line (instead of --manifest)")
    p.add_argument("--prompts", type=int, default=None, help="prompts at most (default 256)")
    p.add_argument("--clone", action="store_true", help="each manifest prompt clones another recording of its "
                                                        "speaker (a model with the voice compressor); scored by SIM too")
    p.add_argument("--cfg-scale", type=float, default=None, help="guidance of the chosen side (default 2)")
    p.add_argument("--temperature", type=float, default=None, help="sampling of both sides (default: the model's)")
    p.add_argument("--top-k", type=int, default=None)
    p.add_argument("--asr-model", default=None, help="CTranslate2 Whisper directory (default: bundled tiny.en)")
    p.add_argument("--rank", type=int, default=None, help="LoRA rank (default 16; alpha = 2 x rank)")
    p.add_argument("--beta", type=float, default=None, help="DPO beta (default 0.1)")
    p.add_argument("--max-wer-loss", type=float, default=None, metavar="X",
                   help="leave out pairs whose guided side's WER is more than X above the other's (default 1: none; "
                        "0 when cloning: no pair that trades words for voice)")
    p.add_argument("--val-pairs", type=int, default=None, help="pairs held out for validation (default 0)")
    p.add_argument("--val-every", type=int, default=None, help="steps between validations (default: 50 with "
                                                               "--val-pairs)")
    p.add_argument("--steps", type=int, default=None, help="schedule length in optimizer steps (default 500)")
    p.add_argument("--lr", type=float, default=None, help="peak learning rate of the adapters (default 5e-5)")
    p.add_argument("--stop-at", type=int, default=None, help="stop this invocation at this step")
    p.add_argument("--minutes", type=float, default=None, help="stop this invocation after so many minutes")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=dpo)


def add_luna_grpo_stages(subparsers: Any, train: Action, export: Action) -> None:
    """``luna-grpo`` and ``luna-grpo-export``."""
    p = subparsers.add_parser(LUNA_GRPO, help="GRPO post-training of a Luna model over its denoising trajectories")
    p.add_argument("--init-from", default=None, help="the shipped Luna model to post-train (name or directory)")
    p.add_argument("--manifest", default=None, help="manifest.jsonl whose texts are the prompts")
    p.add_argument("--out", required=True, help="run directory, e.g. runs/luna-grpo")
    p.add_argument("--resume", action="store_true", help="continue from the run's latest checkpoint")
    p.add_argument("--codec", default=None, help="codec for the reward's audio (default: the one the model names)")
    p.add_argument("--split", default=None, help="manifest split of the training prompts (default train)")
    p.add_argument("--val-split", default=None, help="held-out prompts (default val; '' for none)")
    p.add_argument("--val-items", type=int, default=None, help="held-out prompts to validate on (default 8)")
    p.add_argument("--max-prompts", type=int, default=None, help="use the first N training prompts (0: all)")
    p.add_argument("--languages", default=None, help="comma-separated manifest languages to keep (default en)")
    p.add_argument("--no-sim", action="store_true", default=None, help="WER alone: no speaker-similarity tie-break")
    p.add_argument("--group-size", type=int, default=None, help="G candidates per prompt (>= 2; default 4)")
    p.add_argument("--prompts-per-step", type=int, default=None, help="prompt groups per optimizer step (default 2)")
    p.add_argument("--ppo-epochs", type=int, default=None, help="updates per rollout (default 1)")
    p.add_argument("--clip-eps", type=float, default=None, help="PPO clip epsilon (default 0.2)")
    p.add_argument("--kl-coef", type=float, default=None,
                   help="weight of a KL penalty to the --init-from model (default 0: none, as in the report)")
    p.add_argument("--wer-tie", type=float, default=None, help="WERs this close tie and SIM decides (default 0)")
    p.add_argument("--max-frames", type=int, default=None, help="longest grid a rollout decodes (default 400)")
    p.add_argument("--decode-steps", type=int, default=None, help="MaskGIT steps S of the rollouts (default 16)")
    p.add_argument("--temperature", type=float, default=None, help="rollout sampling temperature (> 0; default 1)")
    p.add_argument("--top-k", type=int, default=None, help="rollout top-k (0: off, the default)")
    p.add_argument("--cfg-scale", type=float, default=None, help="rollout CFG scale (1: none; default 2)")
    p.add_argument("--asr-model", default=None, help="CTranslate2 Whisper directory (default: bundled tiny.en)")
    p.add_argument("--speaker", default=None, help="speaker model: resemblyzer (default) or wavlm:DIR")
    p.add_argument("--steps", type=int, default=None, help="schedule length in optimizer steps (default 200)")
    p.add_argument("--stop-at", type=int, default=None, help="stop this invocation at this step")
    p.add_argument("--minutes", type=float, default=None, help="stop this invocation after so many minutes")
    p.add_argument("--lr", type=float, default=None, help="peak learning rate (default 1e-5)")
    p.add_argument("--warmup", type=int, default=None, help="warm-up steps (default 10)")
    p.add_argument("--val-every", type=int, default=None, help="steps between validations (0: none; default 25)")
    p.add_argument("--checkpoint-every", type=int, default=None, help="steps between checkpoints (default 25)")
    p.add_argument("--device", default=None, help="auto (default), cpu or cuda")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's choice)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=train)

    add_export_parser(subparsers, f"{LUNA_GRPO}-export", "write a Luna GRPO run as a shipped Luna model (fp16 "
                      "safetensors)", "checkpoints/luna-tiny-grpo", export)
