"""Luna-TTS Realtime streaming: the block loop on fake sessions, the KV cache against the full two-stream forward,
immutability of committed blocks, audio through a codec's stream decoder, and a tiny overfit streamed back."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from duet.codecs.base import DecodeResult
from duet.errors import DuetError
from duet.finish import BOUND, STOP
from duet.luna.decode import DecodeConfig
from duet.luna.model import LunaInputs
from duet.luna.realtime import LunaRealtime, RealtimeConfig, RealtimeLogits
from duet.luna.realtime_loss import RealtimeObjective, realtime_training_loss
from duet.luna.stream import (
    KVBlockSession,
    StreamConfig,
    collect,
    end_frame,
    stream_blocks,
    stream_speech,
)

K = 16
MASK = K


class FakeSession:
    """A ``BlockSession`` that knows the answer: block n's logits point at ``grid[n B_k:...]``; its end logits say
    "past the end" from frame ``end`` of the utterance on. Records every step's input and every commit."""

    def __init__(self, grid: torch.Tensor, end: int, block_size: int = 4, rows: int = 2):
        self.grid, self.end = grid, end  # grid (T_max, Q)
        self.block_size, self.num_codebooks, self.mask_id, self.num_rows = block_size, grid.shape[1], MASK, rows
        self.steps: list[torch.Tensor] = []
        self.commits: list[torch.Tensor] = []

    def step(self, block: torch.Tensor) -> RealtimeLogits:
        assert block.shape == (self.num_rows, self.block_size, self.num_codebooks)
        self.steps.append(block.clone())
        n0 = len(self.commits) * self.block_size
        want = self.grid[n0 : n0 + self.block_size]  # (<= B_k, Q)
        codes = torch.zeros(self.num_rows, self.block_size, self.num_codebooks, K)
        codes[:, : want.shape[0]] = torch.nn.functional.one_hot(want, K).float() * 50.0  # sure, even sampled
        frames = torch.arange(n0, n0 + self.block_size)
        end = torch.where(frames >= self.end, 5.0, -5.0)[None].expand(self.num_rows, -1)
        return RealtimeLogits(codes, end)

    def commit(self, block: torch.Tensor) -> None:
        self.commits.append(block.clone())


def _grid(T: int, Q: int = 2, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, K, (T, Q), generator=torch.Generator().manual_seed(seed))


def test_end_frame_is_the_first_frame_over_threshold():
    assert end_frame(torch.tensor([-3.0, -1.0, 2.0, -4.0, 3.0])) == 2
    assert end_frame(torch.tensor([-3.0, -1.0])) == 2  # none: the whole block is speech
    assert end_frame(torch.tensor([0.5, 3.0]), threshold=0.7) == 1  # sigmoid(0.5) = 0.62
    assert end_frame(torch.tensor([1.0, 3.0])) == 0
    assert end_frame(torch.tensor([1.0, 3.0, -2.0, 4.0]), first=1) == 1  # frames before first are speech
    assert end_frame(torch.tensor([1.0, 3.0, -2.0, 4.0]), first=2) == 3
    assert end_frame(torch.tensor([1.0, 3.0]), first=5) == 2  # the floor lies past the block: no end in it
    assert end_frame(torch.tensor([1.0, 3.0]), first=-3) == 0  # a floor already passed changes nothing


@pytest.mark.parametrize("end,chunks", [(10, [4, 4, 2]), (8, [4, 4, 0]), (3, [3]), (0, [0])])
def test_stream_blocks_yields_each_block_and_stops_at_the_learned_end(end, chunks):
    grid = _grid(12)
    session = FakeSession(grid, end)
    cfg = StreamConfig(decode=DecodeConfig(steps=4, temperature=0.0))
    got = list(stream_blocks(session, cfg, torch.Generator().manual_seed(0)))
    assert [c.codes.shape[1] for c in got] == chunks
    assert [c.index for c in got] == list(range(len(chunks)))
    assert [c.start for c in got] == [4 * i for i in range(len(chunks))]
    assert [c.end for c in got] == [None] * (len(chunks) - 1) + [STOP]
    result = collect(iter(got))
    assert torch.equal(result.codes, grid[:end].T) and result.end == STOP
    # every full block before the last was committed, exactly as handed out; the last block never is
    assert len(session.commits) == len(chunks) - 1
    for c, committed in zip(got, session.commits):
        assert torch.equal(c.codes.T, committed)
    # S steps per block, one when the end is decided at the block's first frame
    assert len(session.steps) == 4 * sum(1 for n in chunks if n) + (1 if chunks[-1] == 0 else 0)


def test_frames_past_the_end_stay_masked_and_rows_agree():
    session = FakeSession(_grid(8), end=6)
    list(stream_blocks(session, StreamConfig(decode=DecodeConfig(steps=4)), torch.Generator().manual_seed(1)))
    last_block_steps = session.steps[4:]  # block 1: frames 4..7, end at frame 6 = block frame 2
    for x in last_block_steps:
        assert (x[:, 2:] == MASK).all()  # never generated, exactly as past-the-end frames look in training
        assert torch.equal(x[0], x[1])  # conditional and unconditional rows see the same block
    # the 2 x Q = 4 cells to generate follow the cosine schedule over 4 steps: floor(4 cos(pi/2 s/4)) masked
    masked = [int((x[0] == MASK)[:2].sum()) for x in last_block_steps]
    assert masked == [4, 3, 2, 1]


def test_max_length_bounds_the_stream():
    grid = _grid(40)
    for max_frames, chunks in ((10, [4, 4, 2]), (8, [4, 4])):
        session = FakeSession(grid, end=100)
        got = list(stream_blocks(session, StreamConfig(decode=DecodeConfig(steps=2), max_frames=max_frames)))
        assert [c.codes.shape[1] for c in got] == chunks and got[-1].end == BOUND
        assert torch.equal(collect(iter(got)).codes, grid[:max_frames].T)
    # a learned end inside the bound wins
    got = list(stream_blocks(FakeSession(grid, end=9), StreamConfig(decode=DecodeConfig(steps=2), max_frames=10)))
    assert got[-1].end == STOP and sum(c.codes.shape[1] for c in got) == 9


def test_session_rows_must_match_guidance():
    session = FakeSession(_grid(4), end=2, rows=1)
    with pytest.raises(DuetError, match="rows"):
        next(stream_blocks(session, StreamConfig(decode=DecodeConfig(cfg_scale=2.0))))
    got = list(stream_blocks(session, StreamConfig(decode=DecodeConfig(steps=2, cfg_scale=1.0))))
    assert got[-1].end == STOP


# -- the real model with a KV cache ----------------------------------------------------------------------------------


@pytest.fixture
def realtime(make_config):
    def make(attn: str = "sdpa", seed: int = 0, block_size: int = 4, aligned: int | None = None,
             **kw) -> LunaRealtime:
        torch.manual_seed(seed)
        luna = replace(make_config(attn=attn, **kw), aligned_window=aligned)
        return LunaRealtime(RealtimeConfig(luna=luna, block_size=block_size)).eval()

    return make


@pytest.mark.parametrize("attn, aligned", [("sdpa", None), ("eager", None), ("sdpa", 1)])
@pytest.mark.parametrize("with_prompt", [True, False])
def test_kv_cached_block_logits_equal_the_full_two_stream_forward(realtime, attn, aligned, with_prompt):
    model = realtime(attn=attn, aligned=aligned)
    cfg, bk = model.config.luna, model.block_size
    g = torch.Generator().manual_seed(1)
    text = torch.randint(0, cfg.backbone.vocab_size, (5,), generator=g)
    prompt = torch.randint(0, K, (3, 2), generator=g) if with_prompt else None
    # an aligned model's layout: the text spread over prompt and three blocks (frames past it belong to EOT)
    durations = None if aligned is None else torch.tensor([1.5, 2.0, 3.25, 4.0, 1.0]) * (15 / 11.75)
    session = KVBlockSession(model, text, prompt, guidance=True, durations=durations)
    committed: list[torch.Tensor] = []
    for n in range(3):
        for _ in range(2):  # two refinement states of the active block; only it is recomputed
            active = torch.randint(0, K + 1, (bk, 2), generator=g)  # partly masked
            got = session.step(active[None].expand(2, -1, -1))
            # the whole prefix, recomputed: [text | prompt | noisy blocks 0..n | clean blocks 0..n-1 (+1 junk frame)]
            junk = torch.randint(0, K, (1, 2), generator=g)
            clean = torch.cat(committed + [junk])  # (n B_k + 1, Q): frame n B_k is past the end, padding
            noisy = torch.cat([torch.randint(0, K + 1, (n * bk, 2), generator=g), active])  # (n + 1) B_k frames
            P = 0 if prompt is None else 3
            full = model(
                LunaInputs(
                    text_ids=text[None].expand(2, -1),
                    text_lengths=torch.tensor([5, 0]),  # row 1: CFG's null text
                    target=clean[None].expand(2, -1, -1),
                    target_lengths=torch.tensor([n * bk + 1] * 2),
                    prompt=None if prompt is None else prompt[None].expand(2, -1, -1),
                    prompt_lengths=None if prompt is None else torch.tensor([P, P]),
                    durations=None if durations is None else durations[None].expand(2, -1),
                ),
                noisy[None].expand(2, -1, -1),
            )
            torch.testing.assert_close(got.codes, full.codes[:, n * bk :], atol=1e-4, rtol=0)
            torch.testing.assert_close(got.end, full.end[:, n * bk :], atol=1e-4, rtol=0)
        block = torch.randint(0, K, (bk, 2), generator=g)
        session.commit(block)
        committed.append(block)
        assert session.committed_frames == (n + 1) * bk


def test_cache_holds_only_conditions_and_committed_blocks(realtime):
    model = realtime()
    session = KVBlockSession(model, torch.tensor([1, 2, 3]), torch.randint(0, K, (2, 2)), guidance=False)
    assert session.cache.get_seq_length() == 5
    x = torch.full((1, 4, 2), MASK)
    session.step(x)
    session.step(x)
    assert session.cache.get_seq_length() == 5  # the active block is never kept
    session.commit(torch.zeros(4, 2, dtype=torch.long))
    with pytest.raises(DuetError, match="already waiting"):
        session.commit(torch.zeros(4, 2, dtype=torch.long))
    session.step(x)
    assert session.cache.get_seq_length() == 9  # the commit's KV came with the next step
    with pytest.raises(DuetError, match="whole blocks"):
        session.commit(torch.zeros(3, 2, dtype=torch.long))
    with pytest.raises(DuetError, match="clean codes"):
        session.commit(torch.full((4, 2), MASK))


def test_a_committed_block_never_changes(realtime):
    model = realtime()
    with torch.no_grad():
        model.end_head.bias.fill_(-20.0)  # never end: run into the length bound
    session = KVBlockSession(model, torch.tensor([4, 5, 6, 7]), guidance=True)
    cfg = StreamConfig(decode=DecodeConfig(steps=3), max_frames=17)
    chunks, copies, snapshots = [], [], []
    for chunk in stream_blocks(session, cfg, torch.Generator().manual_seed(0)):
        chunks.append(chunk)
        copies.append(chunk.codes.clone())
        n = session.cache.get_seq_length()
        snapshots.append([(layer.keys[..., :n, :].clone(), layer.values[..., :n, :].clone())
                          for layer in session.cache.layers])
    assert [c.codes.shape[1] for c in chunks] == [4, 4, 4, 4, 1] and chunks[-1].end == BOUND
    for chunk, copy in zip(chunks, copies):
        assert torch.equal(chunk.codes, copy)  # what was handed out is never rewritten
    final = session.cache.layers
    assert session.cache.get_seq_length() == 4 + 4 * 4
    for snap in snapshots:  # every earlier cache state is a prefix of the final one: no committed KV is revisited
        for (k, v), layer in zip(snap, final):
            n = k.shape[-2]
            assert torch.equal(layer.keys[..., :n, :], k) and torch.equal(layer.values[..., :n, :], v)


class FrameCodec:
    """A fake frame-synchronous codec: frame t's samples depend on frame t's codes only (Q = 2, 5 samples/frame)."""

    sample_rate, samples_per_frame = 125, 5

    @property
    def frame_rate(self) -> float:
        return 25.0

    @property
    def codebook_sizes(self) -> tuple[int, ...]:
        return (K, K)

    def encode(self, audio, lengths=None):  # pragma: no cover - not used
        raise NotImplementedError

    def decode(self, codes: torch.Tensor, lengths=None) -> DecodeResult:
        B, _, T = codes.shape
        phase = torch.arange(self.samples_per_frame)[None, None, :]  # (1, 1, spf)
        value = (codes[:, 0, :, None] * 0.05 + codes[:, 1, :, None] * 0.01) * torch.cos(phase * 0.7)  # (B, T, spf)
        return DecodeResult(value.reshape(B, T * self.samples_per_frame).float(), torch.full((B,), T * 5))

    def stream_decoder(self):
        codec = self

        class Frames:
            def push(self, codes):
                return codec.decode(codes).audio

            def flush(self):
                return torch.zeros(1, 0)

        return Frames()


def test_streamed_waveform_equals_the_block_decodes(realtime):
    model = realtime()
    codec = FrameCodec()
    with torch.no_grad():
        model.end_head.bias.fill_(-20.0)
    cfg = StreamConfig(decode=DecodeConfig(steps=2), max_frames=10)
    chunks = list(stream_speech(model, torch.tensor([1, 2]), None, cfg, codec, torch.Generator().manual_seed(0)))
    assert [c.codes.shape[1] for c in chunks] == [4, 4, 2]
    for c in chunks:  # each chunk's audio is there as soon as its block is committed: that block's decode
        assert torch.equal(c.audio, codec.decode(c.codes[None]).audio[0])
    result = collect(iter(chunks))
    assert torch.equal(result.audio, torch.cat([codec.decode(c.codes[None]).audio[0] for c in chunks]))
    torch.testing.assert_close(result.audio, codec.decode(result.codes[None]).audio[0])
    # no codec: same codes (the codec never feeds back into generation), no audio
    plain = collect(stream_speech(model, torch.tensor([1, 2]), None, cfg, None, torch.Generator().manual_seed(0)))
    assert torch.equal(plain.codes, result.codes) and plain.audio is None


# -- tiny end to end -------------------------------------------------------------------------------------------------


def test_overfit_two_utterances_and_stream_them_back(realtime):
    """Two texts, 10 frames (ends inside block 2) and 8 frames (ends on a block boundary: the terminal block)."""
    model = realtime(width=64, layers=2, block_size=4).train()
    g = torch.Generator().manual_seed(0)
    grids = [torch.randint(0, K, (10, 2), generator=g), torch.randint(0, K, (8, 2), generator=g)]
    texts = [torch.tensor([3, 14, 15, 9, 2]), torch.tensor([27, 18, 28, 18, 2])]
    R = 8  # copies of each utterance per step
    target = torch.full((2 * R, 10, 2), MASK)
    target[:R], target[R:, :8] = grids[0], grids[1]
    batch = LunaInputs(
        text_ids=torch.cat([texts[0].expand(R, -1), texts[1].expand(R, -1)]),
        text_lengths=torch.full((2 * R,), 5),
        target=target,
        target_lengths=torch.tensor([10] * R + [8] * R),
    )
    steps = 300
    opt = torch.optim.AdamW(model.parameters(), lr=4e-3, weight_decay=0.0)
    decay = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: 1.0 - i / steps)  # settles: far fewer flaky seeds
    objective = RealtimeObjective()  # text dropout and prompt splits on, as in real training
    for _ in range(steps):
        opt.zero_grad()
        out = realtime_training_loss(model, batch, objective, g)
        out.loss.backward()
        opt.step()
        decay.step()
    model.eval()
    assert float(out.end_accuracy) == 1.0, out
    for text, grid, sizes in zip(texts, grids, ([4, 4, 2], [4, 4, 0])):
        for dcfg in (DecodeConfig(steps=4, temperature=0.0), DecodeConfig(steps=4)):
            exact = 0
            for seed in range(5):
                cfg = StreamConfig(decode=dcfg, max_frames=40)
                chunks = list(stream_speech(model, text, cfg=cfg, generator=torch.Generator().manual_seed(seed)))
                # the learned end is right every time: the 10-frame one inside block 2, the 8-frame one at the start
                # of the terminal block (an empty last chunk)
                assert [c.codes.shape[1] for c in chunks] == sizes and chunks[-1].end == STOP
                exact += torch.equal(collect(iter(chunks)).codes, grid.T)
            # Codes: greedy tokens come back exactly. Sampled at temperature 1, a 2-layer model trained 300 steps on
            # two grids still draws one wrong cell now and then (about 1 stream in 12 over 5 model seeds measured;
            # never more than 2 of 5 for one utterance), so ask for 3 exact streams of 5 there.
            assert exact >= (5 if dcfg.temperature == 0 else 3), (dcfg, exact)
