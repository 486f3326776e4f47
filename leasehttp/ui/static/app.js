// The lease dashboard. It reads the server that serves it: GET /v1/watch as
// a stream through fetch (the browser's event-source API cannot send an
// Authorization header) and GET /v1/stats once a second. The bearer token lives only in this
// tab's sessionStorage and in the Authorization header; it is never put in
// a URL or in the page. Text from the server goes into the page only as
// text (textContent), never as markup.
'use strict';

(() => {
  const TOKEN_KEY = 'lease.dashboard.token';
  const ROW_HEIGHT = 28; // px, as --row in app.css
  const OVERSCAN = 8; // rows drawn above and below the visible ones
  const MAX_EVENTS = 200; // timeline entries kept
  const MAX_HISTORY = 20; // entries kept per key
  const STATS_EVERY = 1000; // ms
  const TICK = 100; // ms between countdown redraws
  const RATE_WINDOW = 10000; // ms of figures that acquisitions/s averages

  const $ = (id) => document.getElementById(id);
  const el = {
    conn: $('conn'), signout: $('signout'), auth: $('auth'), authForm: $('auth-form'), token: $('token'),
    authError: $('auth-error'), main: $('main'), prefixForm: $('prefix-form'), prefix: $('prefix'),
    filter: $('filter'), count: $('count'), notice: $('notice'), viewport: $('viewport'), spacer: $('spacer'),
    rows: $('rows'), history: $('history'), historyKey: $('history-key'), historyHint: $('history-hint'),
    events: $('events'),
    stat: {
      rate: $('stat-rate'), renewFailures: $('stat-renew-failures'), active: $('stat-active'),
      watchers: $('stat-watchers'), waiters: $('stat-waiters'), expirations: $('stat-expirations'),
    },
  };

  const S = {
    token: sessionStorage.getItem(TOKEN_KEY) || '',
    prefix: '',
    filter: '',
    gen: 0, // bumped to stop the loops of an earlier connection
    abort: null, // the AbortController of the current requests
    leases: new Map(), // key -> lease, as shown
    sorted: [], // the keys of leases, sorted
    view: [], // sorted keys that pass the filter
    viewDirty: true,
    history: new Map(), // key -> entries, newest first
    events: [], // newest first
    newEvents: 0, // events not yet drawn, the first of S.events
    historyDirty: false,
    selected: null,
    skew: 0, // the server's clock minus ours, ms
    waiting: new Map(), // key -> acquire requests waiting at the server
    samples: [], // {server, acquisitions} of the recent figures
  };

  // ---- helpers ----

  const api = (route, params) => {
    const u = new URL('../v1/' + route, location.href);
    for (const [k, v] of Object.entries(params || {})) if (v !== '') u.searchParams.set(k, v);
    return u;
  };
  const headers = () => (S.token ? { Authorization: 'Bearer ' + S.token } : {});
  const sleep = (ms, signal) => new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    if (signal) signal.addEventListener('abort', () => { clearTimeout(t); resolve(); }, { once: true });
  });
  const now = () => Date.now() + S.skew; // the server's clock, as well as we know it

  async function errorOf(resp) {
    try {
      const body = await resp.json();
      if (body && body.error && typeof body.error.message === 'string') return body.error.message;
    } catch (_) { /* not the error body */ }
    return 'HTTP ' + resp.status;
  }

  // lease keeps what the page shows of a lease from the API, nothing else:
  // the API sends no secret id to a watch, and none would be kept.
  function lease(d) {
    return {
      key: String(d.key), owner: String(d.owner), token: Number(d.token),
      ttl: Number(d.ttl_ms) || 0, exp: Date.parse(d.expires_at),
    };
  }

  function formatLeft(ms) {
    if (ms <= 0) return 'expired';
    if (ms < 10000) return (ms / 1000).toFixed(1) + ' s';
    const s = Math.round(ms / 1000);
    if (s < 120) return s + ' s';
    const m = Math.floor(s / 60);
    if (m < 120) return m + ' min ' + String(s % 60).padStart(2, '0') + ' s';
    return Math.floor(m / 60) + ' h ' + String(m % 60).padStart(2, '0') + ' min';
  }
  const clock = (t) => new Date(t).toLocaleTimeString([], { hour12: false }) + '.' + String(new Date(t).getMilliseconds()).padStart(3, '0');

  function setConn(state, text) {
    el.conn.dataset.state = state;
    el.conn.textContent = text;
  }

  function notice(text) {
    el.notice.hidden = !text;
    el.notice.textContent = text || '';
  }

  // ---- state ----

  function sortedIndex(arr, key) {
    let lo = 0, hi = arr.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (arr[mid] < key) lo = mid + 1; else hi = mid;
    }
    return lo;
  }

  function put(l) {
    if (!S.leases.has(l.key)) {
      const i = sortedIndex(S.sorted, l.key);
      S.sorted.splice(i, 0, l.key);
      S.viewDirty = true;
    }
    S.leases.set(l.key, l);
  }

  function remove(key) {
    if (!S.leases.delete(key)) return;
    const i = sortedIndex(S.sorted, key);
    if (S.sorted[i] === key) S.sorted.splice(i, 1);
    S.viewDirty = true;
  }

  function replaceAll(snapshot) {
    S.leases = snapshot;
    S.sorted = Array.from(snapshot.keys()).sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
    S.viewDirty = true;
  }

  function remember(kind, l, at) {
    let h = S.history.get(l.key);
    if (!h) S.history.set(l.key, (h = []));
    if (kind === 'held' && h.some((e) => e.token === l.token)) return;
    h.unshift({ kind, key: l.key, owner: l.owner, token: l.token, at });
    if (h.length > MAX_HISTORY) h.length = MAX_HISTORY;
    if (l.key === S.selected) S.historyDirty = true;
  }

  function record(kind, l) {
    const at = Date.now();
    S.events.unshift({ kind, key: l.key, owner: l.owner, token: l.token, at });
    if (S.events.length > MAX_EVENTS) S.events.length = MAX_EVENTS;
    S.newEvents = Math.min(S.newEvents + 1, MAX_EVENTS);
    remember(kind, l, at);
  }

  // apply takes one change of the watch (or of the polling fallback).
  function apply(kind, l) {
    switch (kind) {
      case 'acquired':
        put(l);
        record(kind, l);
        break;
      case 'renewed':
        put(l);
        break;
      case 'released':
      case 'expired': {
        const cur = S.leases.get(l.key);
        if (cur && cur.token === l.token) remove(l.key);
        record(kind, l);
        break;
      }
      default:
        break;
    }
    schedule();
  }

  // ---- drawing ----

  let frame = 0;
  function schedule() {
    if (!frame) frame = requestAnimationFrame(draw);
  }

  function draw() {
    frame = 0;
    if (S.viewDirty) {
      const f = S.filter;
      S.view = f ? S.sorted.filter((k) => k.includes(f) || S.leases.get(k).owner.includes(f)) : S.sorted;
      el.spacer.style.height = S.view.length * ROW_HEIGHT + 'px';
      const n = S.leases.size;
      el.count.textContent = f ? `${S.view.length} of ${n}` : `${n}`;
      el.count.dataset.n = String(n);
      // The leases the table lists, not the server's lease_active_leases,
      // which counts only those granted or renewed through this server
      // since it started (not another replica's, nor a restart's before).
      count(el.stat.active, n);
      S.viewDirty = false;
    }
    drawRows();
    if (S.newEvents) drawEvents();
    if (S.historyDirty) drawHistory();
  }

  const pool = []; // row elements, reused
  function rowElement(i) {
    if (pool[i]) return pool[i];
    const row = document.createElement('div');
    row.className = 'row';
    row.setAttribute('role', 'row');
    const cell = (cls) => { const s = document.createElement('span'); s.className = cls; row.append(s); return s; };
    const r = { row, key: cell('c-key'), owner: cell('c-owner'), token: cell('c-token'), exp: cell('c-exp'), wait: cell('c-wait') };
    const bar = document.createElement('span'); bar.className = 'bar';
    r.fill = document.createElement('span'); r.fill.className = 'fill'; r.fill.style.display = 'block';
    bar.append(r.fill);
    r.left = document.createElement('span'); r.left.className = 'left';
    r.exp.append(bar, r.left);
    el.rows.append(row);
    pool[i] = r;
    return r;
  }

  function setText(node, text) {
    if (node.textContent !== text) node.textContent = text;
  }

  function drawRows() {
    const height = el.viewport.clientHeight || 600;
    let top = el.viewport.scrollTop;
    const maxTop = Math.max(0, S.view.length * ROW_HEIGHT - height);
    if (top > maxTop) { // the view shrank under a scrolled window
      top = maxTop;
      el.viewport.scrollTop = top;
    }
    const first = Math.max(0, Math.floor(top / ROW_HEIGHT) - OVERSCAN);
    const last = Math.min(S.view.length, Math.ceil((top + height) / ROW_HEIGHT) + OVERSCAN);
    el.rows.style.transform = `translateY(${first * ROW_HEIGHT}px)`;
    const t = now();
    let n = 0;
    for (let i = first; i < last; i++, n++) {
      const l = S.leases.get(S.view[i]);
      const r = rowElement(n);
      r.row.hidden = false;
      if (r.row.dataset.key !== l.key) r.row.dataset.key = l.key;
      r.row.classList.toggle('selected', l.key === S.selected);
      setText(r.key, l.key);
      r.key.title = l.key;
      setText(r.owner, l.owner);
      r.owner.title = l.owner;
      setText(r.token, String(l.token));
      const left = l.exp - t;
      const frac = l.ttl > 0 ? Math.max(0, Math.min(1, left / l.ttl)) : (left > 0 ? 1 : 0);
      r.fill.style.width = (frac * 100).toFixed(1) + '%';
      r.fill.classList.toggle('low', frac < 0.25 && left > 0);
      r.fill.classList.toggle('gone', left <= 0);
      setText(r.left, formatLeft(left));
      r.row.dataset.left = String(Math.round(left));
      const w = S.waiting.get(l.key);
      setText(r.wait, w ? String(w) : '');
    }
    for (let i = n; i < pool.length; i++) {
      if (!pool[i].row.hidden) {
        pool[i].row.hidden = true;
        delete pool[i].row.dataset.key;
      }
    }
  }

  function eventItem(e, withKey) {
    const li = document.createElement('li');
    li.className = 'ev-' + e.kind;
    li.dataset.kind = e.kind;
    li.dataset.key = e.key;
    li.dataset.token = String(e.token);
    li.dataset.at = String(e.at);
    const span = (cls, text) => { const s = document.createElement('span'); s.className = cls; s.textContent = text; li.append(s); };
    span('t', clock(e.at));
    span('kind', e.kind);
    span('k', withKey ? e.key : e.owner);
    span('tok', '#' + e.token + (withKey ? ' ' + e.owner : ''));
    li.title = `${e.kind} ${e.key} token ${e.token} owner ${e.owner}`;
    return li;
  }

  // drawEvents adds the events not yet drawn at the top of the timeline
  // and drops the oldest beyond MAX_EVENTS.
  function drawEvents() {
    el.events.prepend(...S.events.slice(0, S.newEvents).map((e) => eventItem(e, true)));
    S.newEvents = 0;
    while (el.events.childElementCount > MAX_EVENTS) el.events.lastElementChild.remove();
  }

  function drawHistory() {
    S.historyDirty = false;
    if (!S.selected) {
      el.historyKey.textContent = '';
      el.historyHint.hidden = false;
      el.history.replaceChildren();
      return;
    }
    el.historyKey.textContent = S.selected;
    el.historyHint.hidden = true;
    const h = S.history.get(S.selected) || [];
    el.history.replaceChildren(...h.map((e) => eventItem(e, false)));
  }

  el.viewport.addEventListener('scroll', schedule, { passive: true });
  window.addEventListener('resize', schedule);
  el.rows.addEventListener('click', (ev) => {
    const row = ev.target.closest('.row');
    if (!row || !row.dataset.key) return;
    S.selected = row.dataset.key;
    S.historyDirty = true;
    schedule();
  });
  el.filter.addEventListener('input', () => {
    S.filter = el.filter.value;
    S.viewDirty = true;
    schedule();
  });
  setInterval(() => { if (!el.main.hidden) schedule(); }, TICK);

  // ---- the server ----

  // readEvents parses a text/event-stream body, calling onEvent for each
  // message with its event name and data.
  async function readEvents(body, onEvent) {
    const reader = body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = '';
    let name = '', data = [];
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buf += value;
      let start = 0;
      for (;;) {
        const nl = buf.indexOf('\n', start);
        if (nl < 0) break;
        let line = buf.slice(start, nl);
        start = nl + 1;
        if (line.endsWith('\r')) line = line.slice(0, -1);
        if (line === '') {
          if (data.length) onEvent(name || 'message', data.join('\n'));
          name = ''; data = [];
          continue;
        }
        if (line[0] === ':') continue;
        const c = line.indexOf(':');
        const field = c < 0 ? line : line.slice(0, c);
        let v = c < 0 ? '' : line.slice(c + 1);
        if (v[0] === ' ') v = v.slice(1);
        if (field === 'event') name = v;
        else if (field === 'data') data.push(v);
      }
      buf = buf.slice(start);
    }
  }

  class Refused extends Error {}

  // watch follows GET /v1/watch, starting over after a second whenever the
  // stream ends; each stream's snapshot replaces what is shown.
  async function watch(gen, signal) {
    while (gen === S.gen) {
      let resp;
      try {
        resp = await fetch(api('watch', { prefix: S.prefix }), { headers: headers(), signal, cache: 'no-store' });
      } catch (e) {
        if (signal.aborted) return;
        setConn('error', 'server unreachable; retrying');
        await sleep(1000, signal);
        continue;
      }
      if (resp.status === 401) throw new Refused(await errorOf(resp));
      if (resp.status === 403) {
        replaceAll(new Map());
        schedule();
        notice(await errorOf(resp));
        setConn('error', 'nothing to show');
        return;
      }
      if (resp.status === 501) {
        await resp.body.cancel();
        return poll(gen, signal);
      }
      if (!resp.ok) {
        setConn('error', await errorOf(resp) + '; retrying');
        await sleep(1000, signal);
        continue;
      }
      notice('');
      setConn('syncing', 'loading…');
      let snapshot = new Map();
      let failed = '';
      try {
        await readEvents(resp.body, (name, data) => {
          if (gen !== S.gen) return;
          if (name === 'end') { // the stream's last event: why the server ended it
            try { failed = JSON.parse(data).error.message; } catch (_) { failed = 'the stream broke'; }
            return;
          }
          if (name === 'synced') {
            for (const l of snapshot.values()) remember('held', l, Date.now());
            replaceAll(snapshot);
            snapshot = null;
            setConn('live', 'live');
            schedule();
            return;
          }
          let l;
          try { l = lease(JSON.parse(data)); } catch (_) { return; }
          if (snapshot) {
            if (name === 'held') snapshot.set(l.key, l);
          } else {
            apply(name, l);
          }
        });
      } catch (e) {
        if (signal.aborted) return;
      }
      if (gen !== S.gen) return;
      setConn('error', (failed || 'the stream ended') + '; reconnecting');
      await sleep(1000, signal);
    }
  }

  // poll lists the prefix once a second, for a backend that cannot watch;
  // changes between two lists are told as the watch would tell them.
  async function poll(gen, signal) {
    setConn('polling', 'polling (the backend cannot watch)');
    let first = true;
    while (gen === S.gen) {
      try {
        const resp = await fetch(api('leases', { prefix: S.prefix }), { headers: headers(), signal, cache: 'no-store' });
        if (resp.status === 401) throw new Refused(await errorOf(resp));
        if (!resp.ok) {
          notice(await errorOf(resp));
        } else {
          notice('');
          const next = new Map();
          for (const d of (await resp.json()).leases) { const l = lease(d); next.set(l.key, l); }
          if (first) {
            for (const l of next.values()) remember('held', l, Date.now());
            replaceAll(next);
            first = false;
          } else {
            for (const [k, old] of S.leases) {
              const l = next.get(k);
              if (!l || l.token !== old.token) apply(old.exp <= now() ? 'expired' : 'released', old);
            }
            for (const l of next.values()) {
              const old = S.leases.get(l.key);
              apply(old && old.token === l.token ? 'renewed' : 'acquired', l);
            }
          }
          schedule();
        }
      } catch (e) {
        if (e instanceof Refused) throw e;
        if (signal.aborted) return;
      }
      await sleep(1000, signal);
    }
  }

  function count(node, v) {
    node.textContent = typeof v === 'number' ? v.toLocaleString('en-US') : v;
    node.dataset.value = String(v);
  }

  // increase is how much the acquisitions counter rose over samples. The
  // counter starts from zero when the server restarts, so a sample below
  // the one before counts as a rise from zero to it, as Prometheus's
  // rate() takes a counter reset; subtracting would show a negative rate.
  function increase(samples) {
    let inc = 0;
    for (let i = 1; i < samples.length; i++) {
      const prev = samples[i - 1].acquisitions, cur = samples[i].acquisitions;
      inc += cur >= prev ? cur - prev : cur;
    }
    return inc;
  }

  // stats polls GET /v1/stats for the figures, the server's clock and the
  // keys with waiters.
  async function stats(gen, signal) {
    while (gen === S.gen) {
      try {
        const sent = Date.now();
        const resp = await fetch(api('stats', { prefix: S.prefix }), { headers: headers(), signal, cache: 'no-store' });
        const got = Date.now();
        if (resp.status === 401) throw new Refused(await errorOf(resp));
        if (resp.ok) {
          const s = await resp.json();
          const server = Date.parse(s.now);
          if (!Number.isNaN(server)) S.skew = server - (sent + got) / 2;
          // The rate over the samples of the last RATE_WINDOW ms.
          const samples = S.samples;
          samples.push({ server, acquisitions: s.acquisitions });
          while (samples.length > 2 && server - samples[1].server >= RATE_WINDOW) samples.shift();
          const first = samples[0];
          if (server > first.server) {
            const rate = increase(samples) / ((server - first.server) / 1000);
            count(el.stat.rate, Math.round(rate * 10) / 10);
          }
          count(el.stat.renewFailures, s.renew_failures);
          count(el.stat.watchers, s.watchers);
          count(el.stat.waiters, s.waiters);
          count(el.stat.expirations, s.expirations);
          S.waiting = new Map((s.waiting || []).map((w) => [String(w.key), Number(w.waiters)]));
          schedule();
        }
      } catch (e) {
        if (e instanceof Refused) throw e;
        if (signal.aborted) return;
      }
      await sleep(STATS_EVERY, signal);
    }
  }

  // ---- connecting ----

  function stop() {
    S.gen++;
    if (S.abort) S.abort.abort();
    S.abort = null;
  }

  function showAuth(message) {
    stop();
    S.token = '';
    sessionStorage.removeItem(TOKEN_KEY);
    replaceAll(new Map());
    S.events = []; S.newEvents = 0; S.history = new Map(); S.selected = null; S.waiting = new Map(); S.samples = [];
    el.rows.replaceChildren(); pool.length = 0;
    el.events.replaceChildren(); el.history.replaceChildren();
    el.main.hidden = true;
    el.signout.hidden = true;
    el.auth.hidden = false;
    el.authError.textContent = message || '';
    setConn('idle', 'not connected');
    el.token.focus();
  }

  // connect asks the server whether this tab may read it, then starts the
  // watch and the figures.
  async function connect() {
    stop();
    const gen = S.gen;
    const ctl = new AbortController();
    S.abort = ctl;
    setConn('syncing', 'connecting…');
    let resp;
    try {
      resp = await fetch(api('stats', { prefix: S.prefix }), { headers: headers(), signal: ctl.signal, cache: 'no-store' });
    } catch (e) {
      if (ctl.signal.aborted) return;
      setConn('error', 'server unreachable; retrying');
      await sleep(1000, ctl.signal);
      if (gen === S.gen) connect();
      return;
    }
    if (gen !== S.gen) return;
    if (resp.status === 401) {
      const msg = S.token ? 'The server refused this token: ' + await errorOf(resp) : '';
      showAuth(msg);
      return;
    }
    el.auth.hidden = true;
    el.main.hidden = false;
    el.signout.hidden = !S.token;
    if (!resp.ok) {
      notice(await errorOf(resp));
      setConn('error', 'refused');
      return;
    }
    S.samples = [];
    const run = (loop) => loop(gen, ctl.signal).catch((e) => {
      if (e instanceof Refused && gen === S.gen) showAuth('The server refused this token: ' + e.message);
    });
    run(watch);
    run(stats);
    schedule();
  }

  el.authForm.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const t = el.token.value.trim();
    el.token.value = ''; // the token is kept in sessionStorage, not in the page
    if (!t) return;
    S.token = t;
    sessionStorage.setItem(TOKEN_KEY, t);
    el.authError.textContent = '';
    connect();
  });

  el.signout.addEventListener('click', () => showAuth(''));

  function readHash() {
    const h = new URLSearchParams(location.hash.slice(1));
    S.prefix = h.get('prefix') || '';
    el.prefix.value = S.prefix;
  }

  el.prefixForm.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const p = el.prefix.value;
    const h = new URLSearchParams();
    if (p) h.set('prefix', p);
    // The prefix is in the fragment, which the browser never sends.
    history.replaceState(null, '', h.toString() ? '#' + h.toString() : location.pathname);
    S.prefix = p;
    replaceAll(new Map());
    notice('');
    connect();
  });
  window.addEventListener('hashchange', () => { readHash(); replaceAll(new Map()); connect(); });

  readHash();
  connect();
})();
