// The reference clip for voice cloning: a sound file the user uploads, or a recording from the microphone
// (MediaRecorder), made into what the speech API's `reference_audio` takes: a base64 WAV, 16-bit mono, at the
// chosen model's sample rate (GET /v1/audio/voices?model=; app.js sets `rate`), so the server neither converts nor
// resamples it.
//
// Whatever the source's format (WAV, MP3, Ogg, the recorder's WebM/Opus), the browser decodes it with WebAudio
// in a one-channel OfflineAudioContext at that rate (decodeAudioData resamples to its context's rate), the
// channels are averaged to mono and wav.js writes the file. Shown only for a model that clones from a clip
// (`cloning` in /v1/audio/voices); app.js sends it with each request while it is set.
"use strict";

const MAX_RECORD_S = 30; // a recording stops itself here: the server's default limit (--max-reference-seconds)

function base64Of(buffer) {
  const bytes = new Uint8Array(buffer);
  let s = "";
  for (let i = 0; i < bytes.length; i += 0x8000) s += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(s);
}

function mono(audio) {
  const out = new Float32Array(audio.length);
  for (let c = 0; c < audio.numberOfChannels; c++) {
    const channel = audio.getChannelData(c);
    for (let i = 0; i < out.length; i++) out[i] += channel[i] / audio.numberOfChannels;
  }
  return out;
}

// One clip at a time. `onChange(clip)` is called with the new clip, or null when it is cleared; a clip is
// { base64, wav (Blob), seconds, bytes, source: "upload" | "recording", name }.
class ReferenceClip {
  constructor(sampleRate, onChange) {
    this.rate = sampleRate;
    this.onChange = onChange;
    this.clip = null;
    this.recorder = null;
  }

  // Any encoded audio (a File is a Blob) -> the clip.
  async load(blob, source, name) {
    const decoder = new OfflineAudioContext(1, 1, this.rate);
    const audio = await decoder.decodeAudioData(await blob.arrayBuffer()); // (channels, samples) at this.rate
    const wav = wavBlob([pcm16(mono(audio))], this.rate);
    const bytes = await wav.arrayBuffer();
    this.clip = { base64: base64Of(bytes), wav, seconds: audio.duration, bytes: bytes.byteLength, source, name };
    this.onChange(this.clip);
    return this.clip;
  }

  get recording() {
    return this.recorder !== null;
  }

  // Records from the microphone until stop() (or MAX_RECORD_S), then loads the recording as the clip.
  async record() {
    const stream = await navigator.mediaDevices.getUserMedia({ audio: true });
    const parts = [];
    const recorder = (this.recorder = new MediaRecorder(stream));
    recorder.ondataavailable = (e) => e.data.size && parts.push(e.data);
    const stopped = new Promise((resolve) => (recorder.onstop = resolve));
    recorder.start();
    const cap = setTimeout(() => this.stop(), MAX_RECORD_S * 1000);
    try {
      await stopped;
    } finally {
      clearTimeout(cap);
      stream.getTracks().forEach((t) => t.stop()); // releases the microphone (and the browser's indicator)
      this.recorder = null;
    }
    return this.load(new Blob(parts, { type: recorder.mimeType }), "recording", "recording");
  }

  stop() {
    if (this.recorder && this.recorder.state !== "inactive") this.recorder.stop();
  }

  clear() {
    this.clip = null;
    this.onChange(null);
  }
}
