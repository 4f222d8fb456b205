// duet's web page: pick a model and voice, speak the text, hear it while it streams, download the WAV.
//
// Models: the selector lists the server's models (GET /v1/models, aliases left out: they name the same models); the
// chosen model's voices, sample rate, cloning, emotions and tags come from GET /v1/audio/voices?model=ID, read again
// whenever the choice changes, and every request names it.
//
// Data path: POST /v1/audio/speech with stream_format "sse" and response_format "pcm" (OpenAI's event shapes,
// see duet/serve/schemas.py) -> each `speech.audio.delta` carries base64 16-bit little-endian mono PCM at the
// rate in the X-Sample-Rate header -> one WebAudio buffer per chunk, scheduled back to back on the AudioContext's
// clock, so playback starts with the first chunk instead of after the whole utterance. The same samples are kept
// and turned into a WAV file at the end (or at Stop; wav.js). No build step, no dependencies: plain browser APIs.
//
// Voice cloning: for a model that clones from a clip (`cloning` in /v1/audio/voices) the page shows a control to
// upload or record a reference clip (clip.js); while one is set, each request sends it as `reference_audio` (a
// base64 16-bit mono WAV) instead of a voice name. "Type and hear" sessions take no clip, so that mode is off
// while one is set.
//
// Word highlighting: for a model with word timings (`timestamps` in /v1/audio/voices) the request asks for them
// (`timestamps: true`); each `speech.audio.timestamps` event adds its words under the text box, and each word is
// highlighted while its audio plays: its start and end (seconds of the audio) are placed on the AudioContext's clock
// through the times the player scheduled each chunk at, so an underrun's delay moves the highlight with the sound.
//
// Expressive control: for a model that takes an emotion (`emotions` in /v1/audio/voices) the emotion selector lists
// them and the chosen one goes out as the request's `instructions` (OpenAI's field, read as one emotion); "none" sends
// no instructions. The tag buttons insert an inline non-verbal tag (`[laughter]`) at the caret, for a model that reads
// that tag (`tags`). For a model without them the controls stay in place, disabled, with a title that says why.
//
// "Type and hear" mode: a WebSocket session on /v1/audio/speech/stream (duet/serve/text_stream.py). Text typed at
// the end of the box is sent as deltas while you type; the server speaks each sentence or clause as soon as it is
// complete, sending binary 16-bit PCM that plays through the same StreamPlayer; Speak sends the end of input.
//
// `window.duet` exposes what happened (state, samples received, TTFA, underruns, WAV size) for the headless
// browser test (tests/serve/test_web_page.py) and for anyone curious in the console.
"use strict";

const $ = (id) => document.getElementById(id);
const LEAD_S = 0.1; // scheduling headroom after an underrun: a little latency buys glitch-free playback

const duet = (window.duet = {
  state: "loading", // loading | idle | streaming | done | stopped | error
  samples: 0, chunks: 0, sampleRate: 0, ttfaMs: null, underruns: 0, wavBytes: 0,
  finishReason: null, error: null, pieces: [],
  timings: false, // the model reports word timings
  words: [], // { word, start, end } of the utterance, as the timestamps events brought them
  cloning: false, // the model clones from a reference clip
  clip: "none", // none | reading | recording | ready | error
  reference: null, // the clip that requests send: { source, name, seconds, bytes }
  emotions: [], // the emotions the model takes (its `instructions`)
  tags: [], // the inline tags it reads, by name: "laughter" for [laughter]
});

function setStatus(state, text) {
  duet.state = state;
  $("status").dataset.state = state;
  $("status").textContent = text;
}

function fill(select, values) {
  select.replaceChildren(...values.map((v) => new Option(v, v)));
}

async function getJSON(path) {
  const r = await fetch(path);
  if (!r.ok) throw new Error(`${path}: HTTP ${r.status}`);
  return r.json();
}

// Server-sent events from a fetch body: yields each `data:` payload parsed as JSON.
async function* sseEvents(body) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += value;
    let end;
    while ((end = buf.indexOf("\n\n")) >= 0) {
      const block = buf.slice(0, end);
      buf = buf.slice(end + 2);
      const data = block.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trim()).join("\n");
      if (data) yield JSON.parse(data);
    }
  }
}

function pcmFromBase64(b64) {
  const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
  const view = new DataView(bytes.buffer);
  const out = new Int16Array(bytes.length >> 1);
  for (let i = 0; i < out.length; i++) out[i] = view.getInt16(2 * i, true);
  return out;
}

// Plays 16-bit chunks gap-free as they arrive; counts underruns (a chunk that came after the previous ran out).
class StreamPlayer {
  constructor(ctx, rate) {
    this.ctx = ctx;
    this.rate = rate;
    this.next = 0;
    this.sources = new Set();
    this.marks = []; // { at, from, n }: chunk i's n samples, from sample `from` of the stream, start at `at`
    this.played = 0;
  }

  // Seconds of the stream -> the AudioContext time they play at; null until that audio is scheduled.
  timeAt(seconds) {
    const s = seconds * this.rate;
    for (const m of this.marks) if (s >= m.from && s <= m.from + m.n) return m.at + (s - m.from) / this.rate;
    return null;
  }

  play(pcm) {
    if (!pcm.length) return;
    const buffer = this.ctx.createBuffer(1, pcm.length, this.rate); // resampled to the device rate by WebAudio
    const channel = buffer.getChannelData(0);
    for (let i = 0; i < pcm.length; i++) channel[i] = pcm[i] / 32768;
    const src = this.ctx.createBufferSource();
    src.buffer = buffer;
    src.connect(this.ctx.destination);
    const now = this.ctx.currentTime;
    if (this.next < now) {
      if (this.next > 0) duet.underruns++;
      this.next = now + LEAD_S;
    }
    src.start(this.next);
    this.marks.push({ at: this.next, from: this.played, n: pcm.length });
    this.played += pcm.length;
    this.next += buffer.duration;
    this.sources.add(src);
    src.onended = () => this.sources.delete(src);
  }

  stop() {
    for (const src of this.sources) src.stop();
    this.sources.clear();
  }
}

let ctx = null;
let controller = null;
let player = null;
let wavUrl = null;
let clip = null; // the ReferenceClip (clip.js) of a model that clones from a clip
let clipUrl = null;
let wordEls = []; // the <span> of each word of duet.words

function showStats() {
  $("ttfa").textContent = duet.ttfaMs === null ? "-" : `${duet.ttfaMs.toFixed(0)} ms`;
  const seconds = duet.sampleRate ? (duet.samples / duet.sampleRate).toFixed(2) : "0";
  $("received").textContent = `${duet.samples} samples (${seconds} s) in ${duet.chunks} chunks`;
  $("underruns").textContent = String(duet.underruns);
}

function showWords(words) {
  for (const w of words) {
    const el = document.createElement("span");
    el.textContent = w.word;
    $("words").append(el, " ");
    duet.words.push({ word: w.word, start: w.start, end: w.end });
    wordEls.push(el);
  }
  $("words").hidden = false;
}

// Marks the word whose audio is playing now; runs once per animation frame while audio plays.
function highlight() {
  if (!player) return;
  const now = ctx.currentTime;
  duet.words.forEach((w, i) => {
    const a = player.timeAt(w.start);
    const b = player.timeAt(w.end);
    wordEls[i].classList.toggle("now", a !== null && b !== null && now >= a && now < b);
  });
  if (duet.state === "streaming" || player.sources.size) requestAnimationFrame(highlight);
}

function offerDownload(chunks) {
  if (wavUrl) URL.revokeObjectURL(wavUrl);
  const blob = wavBlob(chunks, duet.sampleRate);
  duet.wavBytes = blob.size;
  wavUrl = URL.createObjectURL(blob);
  $("download").href = wavUrl;
  $("download").hidden = false;
  $("player").src = wavUrl;
  $("player").hidden = false;
}

async function speak(event) {
  event.preventDefault();
  const text = $("text").value;
  if (!text.trim()) return setStatus("error", "Type some text first.");
  if (controller) controller.abort();
  if (player) player.stop();
  controller = new AbortController();
  // Created on the click (a user gesture), so the browser lets it make sound.
  ctx = ctx || new AudioContext();
  ctx.resume();
  Object.assign(duet, { samples: 0, chunks: 0, ttfaMs: null, underruns: 0, wavBytes: 0, finishReason: null,
                        error: null, words: [] });
  $("download").hidden = true;
  $("stop").disabled = false;
  $("words").replaceChildren();
  $("words").hidden = true;
  wordEls = [];
  showStats();
  const body = { model: $("model").value, voice: $("voice").value, input: text, response_format: "pcm",
                 stream_format: "sse" };
  if (duet.timings) body.timestamps = true;
  if ($("emotion").value) body.instructions = $("emotion").value;
  if (clip?.clip) {
    body.reference_audio = clip.clip.base64; // the cloned voice replaces the named one
    delete body.voice;
  }
  if ($("seed").value !== "") body.seed = Number($("seed").value);

  const chunks = [];
  const t0 = performance.now();
  setStatus("streaming", "Speaking...");
  try {
    const r = await fetch("/v1/audio/speech", { method: "POST", headers: { "Content-Type": "application/json" },
                                                body: JSON.stringify(body), signal: controller.signal });
    if (!r.ok) {
      const err = await r.json().catch(() => null);
      throw new Error(err?.error?.message || `HTTP ${r.status}`);
    }
    duet.sampleRate = Number(r.headers.get("X-Sample-Rate")) || duet.sampleRate;
    player = new StreamPlayer(ctx, duet.sampleRate);
    requestAnimationFrame(highlight);
    for await (const ev of sseEvents(r.body)) {
      if (ev.type === "speech.audio.delta") {
        const pcm = pcmFromBase64(ev.audio);
        if (duet.ttfaMs === null) duet.ttfaMs = performance.now() - t0;
        chunks.push(pcm);
        duet.samples += pcm.length;
        duet.chunks++;
        player.play(pcm);
        showStats();
      } else if (ev.type === "speech.audio.timestamps") {
        showWords(ev.words);
      } else if (ev.type === "speech.audio.done") {
        duet.finishReason = ev.duet?.finish_reason ?? null;
      } else if (ev.type === "error") {
        throw new Error(ev.error?.message || "generation failed");
      }
    }
    offerDownload(chunks);
    setStatus("done", `Done: ${(duet.samples / duet.sampleRate).toFixed(2)} s of audio (${duet.finishReason}).`);
  } catch (err) {
    if (err.name === "AbortError") {
      if (chunks.length) offerDownload(chunks);
      setStatus("stopped", "Stopped.");
    } else {
      duet.error = err.message;
      setStatus("error", `Error: ${err.message}`);
    }
  } finally {
    $("stop").disabled = true;
    showStats();
  }
}

function stop() {
  if (controller) controller.abort(); // closes the connection: the server frees the slot at its next step
  if (live) live.ws.send(JSON.stringify({ type: "session.cancel" }));
  if (player) player.stop();
}

// --- type and hear ---------------------------------------------------------------------------------------------

let live = null; // { ws, sent, chunks, t0 } while a session is open

function startLive() {
  ctx = ctx || new AudioContext(); // typing is a user gesture too
  ctx.resume();
  if (player) player.stop();
  Object.assign(duet, { samples: 0, chunks: 0, ttfaMs: null, underruns: 0, wavBytes: 0, finishReason: null,
                        error: null, pieces: [] });
  $("download").hidden = true;
  $("stop").disabled = false;
  showStats();
  const ws = new WebSocket(`${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/v1/audio/speech/stream`);
  ws.binaryType = "arraybuffer";
  const session = { ws, sent: "", chunks: [], t0: performance.now(), open: false };
  live = session;
  player = new StreamPlayer(ctx, duet.sampleRate);
  const start = { type: "session.start", model: $("model").value, voice: $("voice").value };
  if ($("seed").value !== "") start.seed = Number($("seed").value);
  if ($("emotion").value) start.instructions = $("emotion").value;
  ws.onopen = () => {
    ws.send(JSON.stringify(start));
    session.open = true;
    sendTyped();
  };
  ws.onmessage = (msg) => {
    if (msg.data instanceof ArrayBuffer) {
      const pcm = new Int16Array(msg.data.slice(0)); // little-endian on every platform browsers run on
      if (duet.ttfaMs === null) duet.ttfaMs = performance.now() - session.t0;
      session.chunks.push(pcm);
      duet.samples += pcm.length;
      duet.chunks++;
      player.play(pcm);
      showStats();
      return;
    }
    const ev = JSON.parse(msg.data);
    if (ev.type === "session.started") {
      duet.sampleRate = ev.sample_rate;
      player.rate = ev.sample_rate;
    } else if (ev.type === "piece.started") {
      duet.pieces.push(ev.text);
      setStatus("streaming", `Speaking: ${ev.text}`);
    } else if (ev.type === "error") {
      duet.error = ev.message;
      setStatus("error", `Error: ${ev.message}`);
    } else if (ev.type === "session.done") {
      duet.finishReason = ev.reason;
      if (session.chunks.length) offerDownload(session.chunks);
      if (ev.reason !== "error") {
        setStatus(ev.reason === "done" ? "done" : "stopped",
                  `${ev.reason === "done" ? "Done" : "Stopped"}: ${ev.audio_seconds.toFixed(2)} s of audio in ` +
                  `${ev.pieces} pieces.`);
      }
    }
  };
  ws.onclose = () => {
    if (live === session) live = null;
    $("stop").disabled = true;
    showStats();
  };
  setStatus("streaming", "Listening to your typing...");
}

// Sends what was typed at the end of the box since the last delta; text already sent cannot be taken back.
function sendTyped() {
  if (!live || !live.open) return;
  const text = $("text").value;
  if (!text.startsWith(live.sent)) {
    setStatus("streaming", "Text already sent is spoken as it was; type at the end.");
    return;
  }
  const delta = text.slice(live.sent.length);
  if (delta) live.ws.send(JSON.stringify({ type: "text.delta", delta }));
  live.sent = text;
}

function typed() {
  if (!$("live").checked) return;
  if (!live) startLive();
  else sendTyped();
}

function submit(event) {
  if (!$("live").checked) return speak(event);
  event.preventDefault();
  if (!live) startLive();
  const session = live;
  const end = () => {
    sendTyped();
    session.ws.send(JSON.stringify({ type: "text.done" }));
  };
  if (session.open) end();
  else session.ws.addEventListener("open", end, { once: true });
}

// --- reference clip for voice cloning ----------------------------------------------------------------------------

function showClip(c) {
  duet.clip = c ? "ready" : "none";
  duet.reference = c && { source: c.source, name: c.name, seconds: c.seconds, bytes: c.bytes };
  if (clipUrl) URL.revokeObjectURL(clipUrl);
  clipUrl = c && URL.createObjectURL(c.wav);
  $("clip-player").hidden = !c;
  if (c) $("clip-player").src = clipUrl;
  else $("clip-player").removeAttribute("src");
  $("clip-info").textContent = c ? `${c.name}: ${c.seconds.toFixed(1)} s, sent with each request.`
                                 : "No clip: the model speaks with the voice above.";
  $("clip-clear").disabled = !c;
  $("voice").disabled = Boolean(c);
  $("live").disabled = Boolean(c);
  if (c) $("live").checked = false;
}

function clipFailed(err) {
  duet.clip = "error";
  duet.error = err.message || String(err);
  setStatus("error", `Cannot use that clip: ${duet.error}`);
}

async function clipUploaded() {
  const file = $("clip-file").files[0];
  if (!file) return;
  duet.clip = "reading";
  try {
    await clip.load(file, "upload", file.name);
    setStatus("idle", "Clip ready.");
  } catch (err) {
    clipFailed(err);
  } finally {
    $("clip-file").value = ""; // choosing the same file again reloads it
  }
}

async function recordClicked() {
  if (clip.recording) return clip.stop(); // the pending record() goes on to load the recording
  duet.clip = "recording";
  $("record").textContent = "Stop recording";
  setStatus("idle", "Recording... click Stop recording when done.");
  try {
    await clip.record();
    setStatus("idle", "Clip ready.");
  } catch (err) {
    clipFailed(err);
  } finally {
    $("record").textContent = "Record";
  }
}

function setUpCloning() {
  clip = new ReferenceClip(0, showClip); // its rate is the chosen model's (chooseModel)
  $("clip-file").addEventListener("change", clipUploaded);
  $("record").addEventListener("click", recordClicked);
  $("record").disabled = !(navigator.mediaDevices && window.MediaRecorder); // e.g. a page not served over https
  $("clip-clear").addEventListener("click", () => clip.clear());
}

// --- emotion and tags --------------------------------------------------------------------------------------------

// The chosen model's emotions in the selector ("none" first, the choice kept where the model has it) and its tags on
// the buttons; what the model lacks is disabled, with a title that says why.
function showExpressive(model, emotions, tags) {
  const select = $("emotion");
  const kept = select.value;
  select.replaceChildren(new Option("none", ""), ...emotions.map((e) => new Option(e, e)));
  select.value = emotions.includes(kept) ? kept : "";
  select.disabled = !emotions.length;
  select.parentElement.title = emotions.length ? "Sent as the request's instructions"
                                               : `${model} has no emotion control`;
  for (const button of document.querySelectorAll("#tags button")) {
    const reads = tags.includes(button.dataset.tag);
    button.disabled = !reads;
    button.title = reads ? `Insert ${button.textContent} at the cursor` : `${model} does not read inline tags`;
  }
}

// Inserts the button's tag at the caret (replacing a selection, as typing does), a space apart from the words beside
// it, and leaves the caret after it; the input event lets "type and hear" send it.
function insertTag(event) {
  const box = $("text");
  const { selectionStart: start, selectionEnd: end, value } = box;
  const before = start > 0 && !/\s/.test(value[start - 1]) ? " " : "";
  const after = end < value.length && !/\s/.test(value[end]) ? " " : "";
  box.setRangeText(`${before}[${event.currentTarget.dataset.tag}]${after}`, start, end, "end");
  box.focus();
  box.dispatchEvent(new Event("input"));
}

// --- models ------------------------------------------------------------------------------------------------------

// The chosen model's voices, sample rate and cloning. A clip held for the previous model is dropped (it was made at
// that model's rate), and so is a "type and hear" session (it speaks with the model it started with).
async function chooseModel() {
  if (live) stop();
  const voices = await getJSON(`/v1/audio/voices?model=${encodeURIComponent($("model").value)}`);
  fill($("voice"), voices.data.map((v) => v.id));
  duet.sampleRate = voices.sample_rate;
  duet.cloning = voices.cloning;
  duet.timings = Boolean(voices.timestamps);
  duet.emotions = voices.emotions ?? [];
  duet.tags = voices.tags ?? [];
  showExpressive(voices.model, duet.emotions, duet.tags);
  $("cloning").hidden = !voices.cloning;
  clip.rate = voices.sample_rate;
  clip.clear();
}

async function modelChanged() {
  setStatus("loading", "Loading the model's voices...");
  try {
    await chooseModel();
    setStatus("idle", "Ready.");
  } catch (err) {
    duet.error = err.message;
    setStatus("error", `Cannot load the model's voices: ${err.message}`);
  }
}

async function init() {
  $("form").addEventListener("submit", submit);
  $("text").addEventListener("input", typed);
  $("stop").addEventListener("click", stop);
  $("model").addEventListener("change", modelChanged);
  for (const button of document.querySelectorAll("#tags button")) button.addEventListener("click", insertTag);
  setUpCloning();
  try {
    const models = await getJSON("/v1/models");
    fill($("model"), models.data.filter((m) => (m.root ?? m.id) === m.id).map((m) => m.id));
    await chooseModel();
    setStatus("idle", "Ready.");
  } catch (err) {
    duet.error = err.message;
    setStatus("error", `Cannot reach the server: ${err.message}`);
  }
}

init();
