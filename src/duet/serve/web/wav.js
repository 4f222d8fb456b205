// 16-bit mono PCM WAV files, written in the browser: the page's download of what it heard, and the reference clip
// it sends for voice cloning (clip.js). Samples are little-endian Int16, as the speech API's "pcm" format.
"use strict";

// Float samples in [-1, 1] -> Int16Array. x * 32768, so a clip that came from 16-bit samples (n / 32768) maps back
// to exactly those samples; +1.0 clips to 32767.
function pcm16(samples) {
  const out = new Int16Array(samples.length);
  for (let i = 0; i < samples.length; i++) out[i] = Math.max(-32768, Math.min(32767, Math.round(samples[i] * 32768)));
  return out;
}

// Int16Array chunks at `rate` Hz -> a WAV Blob (44-byte RIFF header, then the samples).
function wavBlob(chunks, rate) {
  const n = chunks.reduce((s, c) => s + c.length, 0);
  const view = new DataView(new ArrayBuffer(44 + 2 * n));
  const ascii = (at, s) => [...s].forEach((ch, i) => view.setUint8(at + i, ch.charCodeAt(0)));
  ascii(0, "RIFF"); view.setUint32(4, 36 + 2 * n, true); ascii(8, "WAVE");
  ascii(12, "fmt "); view.setUint32(16, 16, true); view.setUint16(20, 1, true); view.setUint16(22, 1, true);
  view.setUint32(24, rate, true); view.setUint32(28, 2 * rate, true); view.setUint16(32, 2, true);
  view.setUint16(34, 16, true);
  ascii(36, "data"); view.setUint32(40, 2 * n, true);
  let at = 44;
  for (const c of chunks) for (let i = 0; i < c.length; i++, at += 2) view.setInt16(at, c[i], true);
  return new Blob([view.buffer], { type: "audio/wav" });
}
