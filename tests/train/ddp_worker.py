"""Run by ``test_loop.py`` under ``torchrun --nproc-per-node 2``: rank r trains on batch r of each step.

    python -m torch.distributed.run --standalone --nproc-per-node 2 ddp_worker.py RUN_DIR STEPS
"""

from __future__ import annotations

import sys

import torch
from loop_testing import ddp_case

from duet.gepard.model import GepardModel
from duet.train.loop import FixedBatches, train
from duet.train.objectives.gepard import GepardPretrain

if __name__ == "__main__":
    run_dir, steps = sys.argv[1], int(sys.argv[2])
    torch.set_num_threads(1)
    config, per_rank, _, loop = ddp_case(steps)
    torch.manual_seed(0)
    model = GepardModel(config)
    train(model, GepardPretrain(), FixedBatches(per_rank), loop, run_dir, progress=False)
