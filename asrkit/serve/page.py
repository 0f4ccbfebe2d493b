"""The page ``GET /`` serves: microphone streaming and file upload, with no external assets.

The microphone: ``getUserMedia`` (echo cancellation, noise suppression and gain control off,
so the server hears the signal as it is) into an ``AudioContext`` asked for the model's rate
(``info.sample_rate``: 16 kHz, or 8 kHz for a telephone-band model); an ``AudioWorklet`` (its
code below, loaded from a Blob URL) turns the samples into 16-bit PCM at that rate --
resampling them (a box low-pass, then linear interpolation) where the browser runs the context
at another rate -- and posts 100 ms pieces, announced at that rate in the start message, which the page sends over the
websocket at ``/`` with WeNet's protocol (``continuous_decoding`` on, the phrases of the
hotword box as ``context``).  Partial results show in ``#partial``, finals are appended to
``#finals``.  The upload box POSTs the file to ``/transcribe`` and shows the JSON.
"""
from __future__ import annotations

import json

WORKLET = r"""
class PcmAtRate extends AudioWorkletProcessor {
  constructor(options) {
    super();
    this.ratio = options.processorOptions.inputRate / options.processorOptions.outputRate;
    this.piece = Math.round(options.processorOptions.outputRate / 10);   // 100 ms
    this.pos = 0;            // input position (in input samples) of the next output sample
    this.prev = [];          // input samples kept from the last block
    this.out = [];
  }
  process(inputs) {
    const input = inputs[0];
    if (!input || !input[0]) return true;
    const ch = input[0];
    let x;
    if (this.ratio === 1) { x = ch; }
    else {
      const w = Math.max(1, Math.round(this.ratio));     // box low-pass over w input samples
      const buf = this.prev.concat(Array.from(ch));
      x = [];
      while (this.pos + w < buf.length) {
        const i = Math.floor(this.pos), f = this.pos - i;
        let a = 0, b = 0;
        for (let k = 0; k < w; k++) { a += buf[i + k]; b += buf[i + 1 + k]; }
        x.push(((1 - f) * a + f * b) / w);
        this.pos += this.ratio;
      }
      const keep = Math.floor(this.pos);
      this.prev = buf.slice(keep);
      this.pos -= keep;
    }
    for (let i = 0; i < x.length; i++) {
      const s = Math.max(-1, Math.min(1, x[i]));
      this.out.push(s < 0 ? Math.round(s * 32768) : Math.round(s * 32767));
    }
    if (this.out.length >= this.piece) {
      const pcm = Int16Array.from(this.out);
      this.out = [];
      this.port.postMessage(pcm.buffer, [pcm.buffer]);
    }
    return true;
  }
}
registerProcessor('pcm-at-rate', PcmAtRate);
"""

SCRIPT = r"""
const info = JSON.parse(document.getElementById('info').textContent);
const $ = (id) => document.getElementById(id);
let ws = null, ctx = null, stream = null, node = null;

function status(text) { $('status').textContent = text; }
function wsUrl() { return (location.protocol === 'https:' ? 'wss://' : 'ws://') + location.host + '/'; }
function sentence(msg) { const n = JSON.parse(msg.nbest); return n.length ? n[0].sentence : ''; }

function onMessage(event) {
  const msg = JSON.parse(event.data);
  if (msg.status !== 'ok') { status('failed: ' + msg.message); return; }
  if (msg.type === 'server_ready') status('listening');
  else if (msg.type === 'partial_result') $('partial').textContent = sentence(msg);
  else if (msg.type === 'final_result') {
    const text = sentence(msg);
    $('partial').textContent = '';
    if (text) { const li = document.createElement('li'); li.textContent = text; $('finals').appendChild(li); }
  } else if (msg.type === 'speech_end') status('done');
}

async function start() {
  $('start').disabled = true;
  const phrases = $('hotwords').value.split('\n').map(s => s.trim()).filter(s => s);
  // the model's rate from the browser where it can (?native_rate: the device's rate, resampled by the worklet)
  const rate = info.sample_rate;
  const native = new URLSearchParams(location.search).has('native_rate');
  try { ctx = native ? new AudioContext() : new AudioContext({sampleRate: rate}); }
  catch (e) { ctx = new AudioContext(); }
  const url = URL.createObjectURL(new Blob([document.getElementById('worklet').textContent],
                                           {type: 'application/javascript'}));
  await ctx.audioWorklet.addModule(url);
  ws = new WebSocket(wsUrl());
  ws.binaryType = 'arraybuffer';
  ws.onmessage = onMessage;
  ws.onclose = () => { status($('status').textContent + ' (closed)'); stopAudio(); };
  await new Promise((resolve, reject) => { ws.onopen = resolve; ws.onerror = reject; });
  const start = {signal: 'start', nbest: 1, continuous_decoding: true, sample_rate: rate};
  if (phrases.length) start.context = phrases;
  ws.send(JSON.stringify(start));
  node = new AudioWorkletNode(ctx, 'pcm-at-rate', {processorOptions: {inputRate: ctx.sampleRate, outputRate: rate}});
  node.port.onmessage = (e) => { if (ws && ws.readyState === 1) ws.send(e.data); };
  const mute = ctx.createGain(); mute.gain.value = 0;
  node.connect(mute).connect(ctx.destination);
  // the microphone last: everything it captures from here on reaches the worklet
  stream = await navigator.mediaDevices.getUserMedia({audio: {channelCount: 1, echoCancellation: false,
                                                              noiseSuppression: false, autoGainControl: false}});
  ctx.createMediaStreamSource(stream).connect(node);
  $('rate').textContent = ctx.sampleRate + ' Hz' + (ctx.sampleRate === rate ? '' : ' (resampled to ' + rate + ' Hz)');
  $('stop').disabled = false;
}

function stopAudio() {
  if (node) { node.port.onmessage = null; node.disconnect(); node = null; }
  if (stream) { stream.getTracks().forEach(t => t.stop()); stream = null; }
  if (ctx) { ctx.close(); ctx = null; }
  $('start').disabled = false; $('stop').disabled = true;
}

function stop() {
  stopAudio();
  if (ws && ws.readyState === 1) ws.send(JSON.stringify({signal: 'end'}));
}

async function upload() {
  const file = $('file').files[0];
  if (!file) return;
  $('upload_result').textContent = 'transcribing ' + file.name + ' ...';
  const reply = await fetch('/transcribe?name=' + encodeURIComponent(file.name), {method: 'POST', body: file});
  const obj = await reply.json();
  $('upload_result').textContent = obj.error ? 'error: ' + obj.error : obj.text;
  $('upload_json').textContent = JSON.stringify(obj, null, 1);
}

$('model').textContent = info.model;
$('kind').textContent = info.description;
$('units').textContent = info.num_units + ' units: ' + info.units.slice(0, 40).join(' ');
$('start').onclick = () => start().catch(e => { status('error: ' + e); stopAudio(); });
$('stop').onclick = stop;
$('upload').onclick = () => upload().catch(e => { $('upload_result').textContent = 'error: ' + e; });
status('ready');
"""

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>asrkit serve</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body {{ font-family: sans-serif; max-width: 50em; margin: 2em auto; padding: 0 1em; }}
#partial {{ color: #777; min-height: 1.5em; }} #finals li {{ margin: .2em 0; }}
pre {{ background: #f4f4f4; padding: .5em; overflow: auto; max-height: 20em; }}
.meta {{ color: #555; font-size: 90%; }}
</style></head>
<body>
<h1>asrkit serve</h1>
<p class="meta">model <b id="model"></b><br><span id="kind"></span><br><span id="units"></span></p>
<h2>Microphone</h2>
<p><button id="start">start</button> <button id="stop" disabled>stop</button>
status: <span id="status">loading</span> <span class="meta" id="rate"></span></p>
<p><label>hotwords (one phrase a line, optional)<br><textarea id="hotwords" rows="2" cols="40"></textarea></label></p>
<div id="partial"></div>
<ol id="finals"></ol>
<h2>File</h2>
<p><input type="file" id="file" accept="audio/*"> <button id="upload">transcribe</button></p>
<p id="upload_result"></p>
<pre id="upload_json"></pre>
<script type="application/json" id="info">{info}</script>
<script type="text/plain" id="worklet">{worklet}</script>
<script>{script}</script>
</body></html>
"""


def page_html(info: dict) -> str:
    """The page for the model ``info`` (:meth:`asrkit.serve.model.ServedModel.info`)."""
    data = json.dumps(info, ensure_ascii=False).replace("<", "\\u003c")  # (no "</script>" inside)
    return PAGE.format(info=data, worklet=WORKLET, script=SCRIPT)  # (script elements hold raw text)
