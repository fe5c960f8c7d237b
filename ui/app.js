/* app.js - hookwheel's dashboard: a page over the public API (openapi.yaml).
 *
 * No framework and no build step. The page keeps the operator's bearer token
 * in sessionStorage (this tab only; never localStorage or a cookie) and sends
 * it with every call. Views are hash routes (#/overview, #/timers,
 * #/timers/<id>, #/leases); the shown view re-reads its data every few
 * seconds. Every element is made with createElement and textContent, never
 * from HTML text, so nothing the API returns can become markup; charts are
 * SVG elements drawn here. */
'use strict';

(function () {
  const TOKEN_KEY = 'hookwheel.token';
  const REFRESH_MS = 5000;
  const STATES = ['scheduled', 'retrying', 'paused', 'due'];
  // The API lives at the page's own origin, under the prefix /ui/ was served at.
  const BASE = location.pathname.replace(/\/ui(\/.*)?$/, '');
  const SVGNS = 'http://www.w3.org/2000/svg';

  const $ = (id) => document.getElementById(id);
  let refreshTimer = null;
  let listCursor = null;    // the cursor of the timers page shown
  let listNext = null;      // its next_cursor
  let renderSeq = 0;        // drops answers of views no longer shown

  /* ---- small DOM helpers ------------------------------------------------ */

  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    setAttrs(e, attrs);
    for (const c of children)
      if (c !== null && c !== undefined)
        e.append(c instanceof Node ? c : String(c));
    return e;
  }

  function svg(tag, attrs, text) {
    const e = document.createElementNS(SVGNS, tag);
    setAttrs(e, attrs);
    if (text !== undefined)
      e.textContent = String(text);
    return e;
  }

  function setAttrs(e, attrs) {
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false)
        continue;
      if (k.startsWith('on'))
        e.addEventListener(k.slice(2), v);
      else
        e.setAttribute(k, v === true ? '' : String(v));
    }
  }

  function show(e, yes) {
    e.hidden = !yes;
  }

  function fill(tbody, rows) {
    tbody.replaceChildren(...rows);
  }

  /* ---- formatting --------------------------------------------------------- */

  function fmtTime(v) {
    if (v === null || v === undefined || v === '')
      return '—';
    const d = new Date(v);
    return isNaN(d) ? String(v) : d.toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z');
  }

  function fmtDuration(ms) {
    if (ms === null || ms === undefined)
      return '—';
    const neg = ms < 0;
    let s = Math.round(Math.abs(ms) / 1000);
    let out;
    if (Math.abs(ms) < 1000)
      out = Math.round(Math.abs(ms)) + ' ms';
    else if (s < 60)
      out = s + ' s';
    else if (s < 3600)
      out = Math.floor(s / 60) + ' min' + (s % 60 ? ' ' + (s % 60) + ' s' : '');
    else
      out = Math.floor(s / 3600) + ' h' + (s % 3600 >= 60 ? ' ' + Math.floor((s % 3600) / 60) + ' min' : '');
    return neg ? '-' + out : out;
  }

  function fmtDue(ms) {
    if (!ms)
      return '—';
    const d = ms - Date.now();
    return fmtTime(ms) + (d >= 0 ? ' (in ' + fmtDuration(d) + ')' : ' (' + fmtDuration(-d) + ' ago)');
  }

  /* ---- messages ----------------------------------------------------------- */

  function alertMsg(text) {
    const a = $('alert');
    a.textContent = text || '';
    show(a, !!text);
  }

  function statusMsg(text) {
    $('status').textContent = text || '';
  }

  function problemText(res) {
    const d = res.data;
    if (d && typeof d === 'object' && d.detail)
      return d.detail + ' (' + res.status + ')';
    return 'HTTP ' + res.status;
  }

  /* ---- the API ------------------------------------------------------------ */

  class AuthError extends Error {}

  function token() {
    return sessionStorage.getItem(TOKEN_KEY);
  }

  // One call: {status, data} for any answer; throws AuthError on 401 (after
  // sending the operator back to the log-in form) and Error when the server
  // cannot be reached.
  async function call(method, path, body, tok) {
    const headers = {Accept: 'application/json'};
    const t = tok !== undefined ? tok : token();
    if (t)
      headers.Authorization = 'Bearer ' + t;
    const init = {method, headers, cache: 'no-store', credentials: 'omit'};
    if (body !== undefined) {
      headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    let res;
    try {
      res = await fetch(BASE + path, init);
    } catch (e) {
      throw new Error('hookwheel cannot be reached: ' + e.message);
    }
    const text = await res.text();
    let data = null;
    if (text) {
      try {
        data = JSON.parse(text);
      } catch (e) {
        data = text;
      }
    }
    if (res.status === 401 && tok === undefined) {
      sessionStorage.removeItem(TOKEN_KEY);
      forget();
      loginError('The token was refused (401 Unauthorized): log in again with a valid token.');
      throw new AuthError('401');
    }
    return {status: res.status, data};
  }

  async function callOk(method, path, body) {
    const res = await call(method, path, body);
    if (res.status < 200 || res.status > 299)
      throw new Error(method + ' ' + path + ': ' + problemText(res));
    return res.data;
  }

  /* ---- log-in ------------------------------------------------------------- */

  function loginError(text) {
    const e = $('login-error');
    e.textContent = text;
    show(e, true);
    showView('login');
  }

  async function login(ev) {
    ev.preventDefault();
    const t = $('token').value.trim();
    show($('login-error'), false);
    let res;
    try {
      res = await call('GET', '/queues', undefined, t);
    } catch (e) {
      loginError(e.message);
      return;
    }
    if (res.status === 401) {
      loginError('The token was refused (401 Unauthorized). Check it and try again.');
      return;
    }
    sessionStorage.setItem(TOKEN_KEY, t);
    $('token').value = '';
    if (!location.hash || location.hash === '#/login')
      location.hash = '#/overview';
    else
      route();
  }

  // Drops what the page shows of the token's namespace: the next token may
  // be another namespace's, and its views must not start from this one's
  // data (a looked-up lease, the charts' queue, the tables drawn).
  function forget() {
    statsQueue = '';
    listCursor = listNext = null;
    $('stats-queue').replaceChildren(el('option', {value: ''}, 'All queues'));
    for (const t of ['queues-table', 'timers-table', 'attempts-table', 'leases-table'])
      fill($(t).tBodies[0], []);
    for (const id of ['chart-queues', 'chart-deliveries', 'chart-lateness', 'timer-summary', 'timer-actions',
                      'lease-summary'])
      $(id).replaceChildren();
    for (const id of ['timer-id', 'timer-state', 'timer-spec', 'timer-missing', 'lease-missing', 'queues-updated'])
      $(id).textContent = '';
    show($('lease-found'), false);
    show($('lease-missing'), false);
    $('lease-key').value = '';
    $('find-id').value = '';
    statusMsg('');
  }

  function logout() {
    sessionStorage.removeItem(TOKEN_KEY);
    stopRefresh();
    forget();
    show($('login-error'), false);
    alertMsg('');
    statusMsg('Logged out.');
    showView('login');
  }

  /* ---- views and routing ------------------------------------------------- */

  const VIEWS = ['login', 'overview', 'timers', 'timer', 'leases'];

  function showView(name) {
    for (const v of VIEWS)
      show($('view-' + v), v === name);
    const inside = name !== 'login';
    show($('nav'), inside);
    show($('logout'), inside);
    for (const a of document.querySelectorAll('#nav a')) {
      const on = a.dataset.view === name || (name === 'timer' && a.dataset.view === 'timers');
      if (on)
        a.setAttribute('aria-current', 'page');
      else
        a.removeAttribute('aria-current');
    }
    if (!inside) {
      stopRefresh();
      $('token').focus();
    }
  }

  function stopRefresh() {
    if (refreshTimer)
      clearInterval(refreshTimer);
    refreshTimer = null;
  }

  function every(fn) {
    stopRefresh();
    refreshTimer = setInterval(() => run(fn), REFRESH_MS);
  }

  // Runs a view's loader; errors become the alert line.
  async function run(fn) {
    try {
      await fn();
      alertMsg('');
    } catch (e) {
      if (!(e instanceof AuthError))
        alertMsg(e.message);
    }
  }

  function parseHash() {
    const h = location.hash.replace(/^#\/?/, '');
    const [path, query] = h.split('?');
    return {parts: path.split('/').filter(Boolean).map(decodeURIComponent),
            query: new URLSearchParams(query || '')};
  }

  function route() {
    renderSeq++;
    alertMsg('');
    if (token() === null) {
      showView('login');
      return;
    }
    const {parts, query} = parseHash();
    const view = parts[0] || 'overview';
    stopRefresh();
    if (view === 'timers' && parts.length > 1) {
      showView('timer');
      const load = () => loadTimer(parts.slice(1).join('/'));
      run(load);
      every(load);
    } else if (view === 'timers') {
      showView('timers');
      openList(query);
    } else if (view === 'leases') {
      showView('leases');
      run(loadLeases);
      every(loadLeases);
    } else {
      showView('overview');
      run(loadOverview);
      every(loadOverview);
    }
  }

  /* ---- the confirmation dialog ---------------------------------------- */

  // Asks before an action. fields: [{name, label, type, value, min, max, step}]
  // become inputs; resolves to their values ({} without fields), or null.
  function confirmAction(title, text, fields) {
    const dlg = $('confirm');
    $('confirm-title').textContent = title;
    $('confirm-text').textContent = text;
    const box = $('confirm-fields');
    box.replaceChildren();
    for (const f of fields || []) {
      const id = 'confirm-field-' + f.name;
      box.append(el('label', {for: id}, f.label),
                 el('input', {id, name: f.name, type: f.type || 'text', value: f.value,
                              min: f.min, max: f.max, step: f.step, required: true}));
    }
    return new Promise((resolve) => {
      dlg.addEventListener('close', function done() {
        dlg.removeEventListener('close', done);
        if (dlg.returnValue !== 'ok') {
          resolve(null);
          return;
        }
        const values = {};
        for (const f of fields || [])
          values[f.name] = $('confirm-field-' + f.name).value;
        resolve(values);
      });
      dlg.returnValue = '';
      dlg.showModal();
      $(fields && fields.length ? 'confirm-field-' + fields[0].name : 'confirm-ok').focus();
    });
  }

  // Runs a confirmed action and reports how it went; then reloads the view.
  async function act(what, fn, reload) {
    try {
      const msg = await fn();
      statusMsg(msg || what + ': done.');
      alertMsg('');
    } catch (e) {
      if (!(e instanceof AuthError))
        alertMsg(what + ' failed: ' + e.message);
    }
    if (reload)
      await run(reload);
  }

  /* ---- overview: queues --------------------------------------------------- */

  // The charts' queue ('' for all): GET /stats answers that queue's minutes
  // and, whatever the queue, every queue's hour totals for the table.
  let statsQueue = '';

  async function loadOverview() {
    const seq = renderSeq, queue = statsQueue;
    const path = '/stats?minutes=60' + (queue ? '&queue=' + encodeURIComponent(queue) : '');
    const [queues, stats] = await Promise.all([callOk('GET', '/queues'), call('GET', path)]);
    if (seq !== renderSeq || queue !== statsQueue)
      return; /* another view, or another queue chosen meanwhile: its own load draws */
    const ok = stats.status === 200 && stats.data && Array.isArray(stats.data.minutes);
    renderQueues(queues.queues || [], ok ? stats.data.queue_totals || {} : null);
    renderStats(stats);
    $('queues-updated').textContent = 'Updated ' + fmtTime(Date.now()) + '; refreshed every ' +
      REFRESH_MS / 1000 + ' s.';
  }

  function count(q, state) {
    if (state === 'due')
      return q.due || 0;
    return (q.timers && q.timers[state]) || 0;
  }

  // totals: GET /stats's queue_totals (the hour per queue), null when
  // GET /stats did not answer (the columns show '—').
  function renderQueues(queues, totals) {
    const hour = (name, k) => (totals ? (totals[name] ? totals[name][k] : 0) : '—');
    const rows = queues.map((q) => {
      const acts = el('div', {class: 'row-actions'},
        el('button', {type: 'button', 'aria-label': (q.paused ? 'Resume queue ' : 'Pause queue ') + q.name,
                      'data-action': q.paused ? 'resume' : 'pause',
                      onclick: () => pauseQueue(q.name, !q.paused)}, q.paused ? 'Resume' : 'Pause'),
        el('button', {type: 'button', 'aria-label': 'Edit the limits of queue ' + q.name, 'data-action': 'edit',
                      onclick: () => editQueue(q.name)}, 'Edit'),
        el('button', {type: 'button', 'aria-label': 'Replay the dead letters of queue ' + q.name,
                      'data-action': 'replay', onclick: () => deadLetters(q.name, 'replay')}, 'Replay failed'),
        el('button', {type: 'button', 'aria-label': 'Purge the dead letters of queue ' + q.name,
                      'data-action': 'purge', class: 'danger',
                      onclick: () => deadLetters(q.name, 'purge')}, 'Purge failed'));
      const num = (col, v) => el('td', {class: 'num', 'data-col': col}, v);
      return el('tr', {'data-queue': q.name},
        el('th', {scope: 'row'}, el('a', {href: '#/timers?queue=' + encodeURIComponent(q.name)}, q.name)),
        num('scheduled', count(q, 'scheduled')), num('retrying', count(q, 'retrying')),
        num('paused', count(q, 'paused')), num('due', count(q, 'due')),
        num('oldest_due', q.oldest_due_age_ms ? fmtDuration(q.oldest_due_age_ms) : '—'),
        num('parallelism', q.parallelism), num('rate', q.max_dispatches_per_second || 'no limit'),
        num('delivered_1h', hour(q.name, 'delivered')), num('failed_1h', hour(q.name, 'failed')),
        el('td', {'data-col': 'state'}, el('span', {class: 'badge ' + (q.paused ? 'paused' : 'running')},
                                         q.paused ? 'paused' : 'running')),
        el('td', {}, acts));
    });
    if (!rows.length)
      rows.push(el('tr', {}, el('td', {colspan: 12, class: 'muted'},
                                'No queue yet: queues appear with their first timer or their first PUT or PATCH.')));
    fill($('queues-table').tBodies[0], rows);
    drawBars($('chart-queues'), queues);
  }

  // PATCH changes only the controls named, in one step in Redis: a change
  // another operator makes meanwhile to another control is kept.
  async function patchQueue(name, change) {
    return callOk('PATCH', '/queues/' + encodeURIComponent(name), change);
  }

  async function pauseQueue(name, pause) {
    const verb = pause ? 'Pause' : 'Resume';
    const text = pause ? 'No attempt of queue "' + name + '" starts until it is resumed; its due timers wait, in due order.'
                       : 'Queue "' + name + '" starts its due timers again.';
    if (!(await confirmAction(verb + ' queue ' + name + '?', text)))
      return;
    await act(verb + ' queue ' + name, async () => {
      await patchQueue(name, {paused: pause});
      return 'Queue ' + name + (pause ? ' paused.' : ' resumed.');
    }, loadOverview);
  }

  async function editQueue(name) {
    let q;
    try {
      q = await callOk('GET', '/queues/' + encodeURIComponent(name));
    } catch (e) {
      if (!(e instanceof AuthError))
        alertMsg(e.message);
      return;
    }
    const v = await confirmAction('Limits of queue ' + name,
      'Attempts in flight at once, and attempt starts per second (0: no limit), ' +
      (q.scope === 'instance' ? 'on each instance.' : 'across all instances.'),
      [{name: 'parallelism', label: 'Parallelism', type: 'number', value: q.parallelism, min: 1, step: 1},
       {name: 'rate', label: 'Rate (starts per second, 0: no limit)', type: 'number',
        value: q.max_dispatches_per_second, min: 0, step: 'any'}]);
    if (!v)
      return;
    await act('Edit queue ' + name, async () => {
      await patchQueue(name, {parallelism: Number(v.parallelism), max_dispatches_per_second: Number(v.rate)});
      return 'Queue ' + name + ': parallelism ' + v.parallelism + ', rate ' + v.rate + '.';
    }, loadOverview);
  }

  // Bulk replay or purge: one call handles a slice; repeat while `more`.
  async function deadLetters(name, op) {
    const text = op === 'replay' ? 'Every failed timer of queue "' + name + '" runs again now.'
                                 : 'Every failed timer of queue "' + name + '" is deleted. This cannot be undone.';
    if (!(await confirmAction((op === 'replay' ? 'Replay' : 'Purge') + ' the dead letters of ' + name + '?', text)))
      return;
    await act(op + ' dead letters of ' + name, async () => {
      let n = 0;
      for (let i = 0; i < 100; i++) {
        const r = await callOk('POST', '/dead-letters/' + op, {queue: name});
        n += op === 'replay' ? r.replayed : r.purged;
        if (!r.more)
          break;
      }
      return n + ' dead letter' + (n === 1 ? '' : 's') + ' of ' + name + (op === 'replay' ? ' replayed.' : ' purged.');
    }, loadOverview);
  }

  /* ---- charts ------------------------------------------------------------- */

  // The top of a chart's axis: four round steps (1, 2 or 5 times a power of
  // ten) that reach max; whole steps for counts.
  function axisTop(max, whole) {
    const raw = Math.max(max, whole ? 4 : 1) / 4;
    const p = Math.pow(10, Math.floor(Math.log10(raw)));
    let step = [1, 2, 5, 10].map((m) => m * p).find((v) => v >= raw - 1e-12);
    if (whole)
      step = Math.max(1, Math.ceil(step));
    return step * 4;
  }

  function axes(g, w, h, pad, ymax, unit) {
    for (let i = 0; i <= 4; i++) {
      const y = pad.t + (h - pad.t - pad.b) * (1 - i / 4);
      g.append(svg('line', {x1: pad.l, x2: w - pad.r, y1: y, y2: y, class: 'grid'}));
      const v = ymax * i / 4;
      g.append(svg('text', {x: pad.l - 6, y: y + 4, class: 'tick', 'text-anchor': 'end'},
                   (Number.isInteger(v) ? v : +v.toFixed(2)) + (i === 4 && unit ? ' ' + unit : '')));
    }
  }

  // The chart's width in SVG units is its box's width in pixels, so text
  // keeps its size at any width (the view redraws every few seconds).
  function chartWidth(box) {
    return Math.max(300, Math.round(box.clientWidth || 640));
  }

  function legend(g, x, y, items) {
    let off = x;
    for (const it of items) {
      g.append(svg('rect', {x: off, y: y - 9, width: 10, height: 10, class: it.cls}));
      const t = svg('text', {x: off + 14, y, class: 'tick'}, it.name);
      g.append(t);
      off += 24 + it.name.length * 7;
    }
  }

  // Grouped bars: per queue one bar per state (scheduled, retrying, paused, due).
  function drawBars(box, queues) {
    const w = chartWidth(box), h = 240, pad = {l: 44, r: 10, t: 26, b: 40};
    const root = svg('svg', {viewBox: `0 0 ${w} ${h}`, role: 'img', class: 'chart-svg',
                             'aria-label': 'Bar chart: timers of each queue by state'});
    if (!queues.length) {
      root.append(svg('text', {x: w / 2, y: h / 2, 'text-anchor': 'middle', class: 'tick'}, 'no queues yet'));
      box.replaceChildren(root);
      return;
    }
    let max = 0;
    for (const q of queues)
      for (const s of STATES)
        max = Math.max(max, count(q, s));
    const ymax = axisTop(max, true);
    axes(root, w, h, pad, ymax);
    legend(root, pad.l, 14, STATES.map((s) => ({name: s, cls: 'bar-' + s})));
    const shown = queues.slice(0, 12);
    const gw = (w - pad.l - pad.r) / shown.length;
    const bw = Math.max(2, Math.min(24, (gw - 8) / STATES.length));
    const ph = h - pad.t - pad.b;
    shown.forEach((q, i) => {
      const x0 = pad.l + i * gw + (gw - bw * STATES.length) / 2;
      STATES.forEach((s, k) => {
        const v = count(q, s);
        const bh = v ? Math.max(1, ph * v / ymax) : 0;
        const r = svg('rect', {x: x0 + k * bw, y: pad.t + ph - bh, width: bw - 1, height: bh,
                               class: 'bar-' + s, 'data-queue': q.name, 'data-state': s, 'data-value': v});
        r.append(svg('title', {}, `${q.name}: ${v} ${s}`));
        root.append(r);
      });
      const name = q.name.length > 14 ? q.name.slice(0, 13) + '…' : q.name;
      root.append(svg('text', {x: pad.l + i * gw + gw / 2, y: h - pad.b + 16, 'text-anchor': 'middle',
                               class: 'tick'}, name));
    });
    if (queues.length > shown.length)
      root.append(svg('text', {x: w - pad.r, y: h - 6, 'text-anchor': 'end', class: 'tick'},
                      `first ${shown.length} of ${queues.length} queues`));
    box.replaceChildren(root);
  }

  // Lines over the minutes; a null value leaves a gap.
  function drawLines(box, label, minutes, series, unit) {
    const w = chartWidth(box), h = 220, pad = {l: 56, r: 10, t: 26, b: 30};
    const root = svg('svg', {viewBox: `0 0 ${w} ${h}`, role: 'img', class: 'chart-svg', 'aria-label': label});
    let max = 0;
    for (const s of series)
      for (const v of s.values)
        if (v !== null && v !== undefined)
          max = Math.max(max, v);
    const ymax = axisTop(max, !unit);
    axes(root, w, h, pad, ymax, unit);
    legend(root, pad.l, 14, series);
    const n = Math.max(minutes.length, 2);
    const px = (i) => pad.l + (w - pad.l - pad.r) * i / (n - 1);
    const py = (v) => pad.t + (h - pad.t - pad.b) * (1 - v / ymax);
    for (const i of [0, Math.floor((n - 1) / 2), n - 1]) {
      if (!minutes[i])
        continue;
      const t = new Date(minutes[i].start);
      root.append(svg('text', {x: px(i), y: h - 8, class: 'tick',
                               'text-anchor': i === 0 ? 'start' : i === n - 1 ? 'end' : 'middle'},
                      isNaN(t) ? '' : t.toISOString().slice(11, 16) + 'Z'));
    }
    for (const s of series) {
      let d = '', pen = false;
      s.values.forEach((v, i) => {
        if (v === null || v === undefined) {
          pen = false;
          return;
        }
        d += (pen ? 'L' : 'M') + px(i).toFixed(1) + ' ' + py(v).toFixed(1);
        pen = true;
        const c = svg('circle', {cx: px(i).toFixed(1), cy: py(v).toFixed(1), r: 2, class: 'dot ' + s.cls,
                                 'data-value': v});
        c.append(svg('title', {}, `${minutes[i].start}: ${v}${unit ? ' ' + unit : ''} ${s.name}`));
        root.append(c);
      });
      if (d)
        root.append(svg('path', {d, class: 'line ' + s.cls, fill: 'none'}));
    }
    if (max === 0 && !series.some((s) => s.values.some((v) => v !== null && v !== undefined)))
      root.append(svg('text', {x: (pad.l + w - pad.r) / 2, y: pad.t + (h - pad.t - pad.b) / 2,
                               'text-anchor': 'middle', class: 'tick'}, 'no attempts in this hour'));
    box.replaceChildren(root);
  }

  function renderStats(res) {
    const note = $('stats-note');
    if (res.status === 404) {
      note.textContent = 'History not available: this hookwheel has no GET /stats (an older version).';
      show(note, true);
      show($('stats-form'), false);
      show($('stats-charts'), false);
      return;
    }
    if (res.status !== 200 || !res.data || !Array.isArray(res.data.minutes)) {
      note.textContent = 'History could not be read: ' + problemText(res);
      show(note, true);
      show($('stats-form'), false);
      show($('stats-charts'), false);
      return;
    }
    show(note, false);
    show($('stats-form'), true);
    show($('stats-charts'), true);
    statsQueues(res.data.queues || []);
    const m = res.data.minutes, of = statsQueue ? ' of queue ' + statsQueue : ' of all queues';
    const lat = (k) => m.map((x) => (x.lateness_ms ? x.lateness_ms[k] : null));
    drawLines($('chart-deliveries'), 'Line chart: deliveries and failures per minute over the last hour' + of, m, [
      {name: 'delivered', cls: 'series-delivered', values: m.map((x) => x.delivered)},
      {name: 'failed', cls: 'series-failed', values: m.map((x) => x.failed)},
    ]);
    drawLines($('chart-lateness'), 'Line chart: firing lateness p50 and p99 per minute over the last hour' + of, m, [
      {name: 'p50', cls: 'series-p50', values: lat('p50')},
      {name: 'p99', cls: 'series-p99', values: lat('p99')},
    ], 'ms');
  }

  // The selector's options: "All queues", the hour's queues and the one
  // chosen (kept when its figures have aged out). Rebuilt only when the list
  // changes, so a refresh does not close the list under the user's pointer.
  function statsQueues(names) {
    const sel = $('stats-queue');
    const want = [''].concat(names);
    if (statsQueue && !names.includes(statsQueue))
      want.push(statsQueue);
    const have = Array.from(sel.options, (o) => o.value);
    if (have.join('/') !== want.join('/'))
      sel.replaceChildren(...want.map((n) => el('option', {value: n}, n || 'All queues')));
    sel.value = statsQueue;
  }

  /* ---- timers list ---------------------------------------------------- */

  function openList(query) {
    const f = $('list-form');
    f.state.value = query.get('state') || 'scheduled';
    f.queue.value = query.get('queue') || '';
    f.label.value = query.get('label') || '';
    if (query.get('limit'))
      f.limit.value = query.get('limit');
    listCursor = null;
    run(loadList);
  }

  async function loadList() {
    const f = $('list-form');
    const q = new URLSearchParams({state: f.state.value, limit: f.limit.value});
    if (f.queue.value.trim())
      q.set('queue', f.queue.value.trim());
    if (f.label.value.trim())
      q.set('label', f.label.value.trim());
    if (listCursor)
      q.set('cursor', listCursor);
    const seq = renderSeq;
    const page = await callOk('GET', '/timers?' + q.toString());
    if (seq !== renderSeq)
      return;
    listNext = page.next_cursor;
    const rows = (page.items || []).map((t) => {
      const last = t.last_attempt;
      return el('tr', {'data-id': t.id},
        el('th', {scope: 'row'}, el('a', {href: '#/timers/' + encodeURIComponent(t.id), class: 'mono'}, t.id)),
        el('td', {}, el('span', {class: 'badge ' + t.state}, t.state)),
        el('td', {}, t.queue), el('td', {}, fmtDue(t.fire_at_ms)), el('td', {class: 'num'}, t.attempts),
        el('td', {}, last ? (last.status !== null ? 'HTTP ' + last.status : last.error) : '—'));
    });
    fill($('timers-table').tBodies[0], rows);
    show($('timers-empty'), rows.length === 0);
    $('page-next').disabled = !listNext;
    $('page-first').disabled = !listCursor;
  }

  function listSubmit(ev) {
    ev.preventDefault();
    const f = $('list-form');
    const q = new URLSearchParams({state: f.state.value});
    for (const k of ['queue', 'label'])
      if (f[k].value.trim())
        q.set(k, f[k].value.trim());
    q.set('limit', f.limit.value);
    const h = '#/timers?' + q.toString();
    if (location.hash === h)
      route();
    else
      location.hash = h;
  }

  /* ---- one timer ------------------------------------------------------ */

  const SPEC_KEYS = ['id', 'url', 'method', 'headers', 'body', 'json', 'queue', 'labels', 'timeout_ms',
                     'retry', 'repeat', 'on_success', 'on_failure'];

  async function loadTimer(id) {
    const seq = renderSeq;
    const res = await call('GET', '/timers/' + encodeURIComponent(id));
    if (seq !== renderSeq)
      return;
    $('timer-id').textContent = id;
    const missing = $('timer-missing');
    if (res.status === 404) {
      missing.textContent = 'No timer "' + id + '" in your namespace (never created, or its record expired).';
      show(missing, true);
      show($('timer-body'), false);
      $('timer-state').textContent = '';
      $('timer-state').className = 'badge';
      return;
    }
    if (res.status !== 200)
      throw new Error('GET /timers/' + id + ': ' + problemText(res));
    show(missing, false);
    show($('timer-body'), true);
    renderTimer(res.data);
  }

  function renderTimer(t) {
    const st = $('timer-state');
    st.textContent = t.state;
    st.className = 'badge ' + t.state;
    const dl = $('timer-summary');
    const items = [
      ['State', t.state], ['Queue', t.queue], ['Due', fmtDue(t.fire_at_ms)],
      ['Created', fmtTime(t.created_at)], ['Attempts (this run)', t.attempts], ['Runs', t.runs],
      ['Version', t.version], ['Request', t.method + ' ' + t.url],
      ['Labels', t.labels ? Object.entries(t.labels).map(([k, v]) => k + ':' + v).join(', ') : '—'],
      ['Retry', `${t.retry.max_attempts} attempts, backoff ${fmtDuration(t.retry.min_backoff_ms)}–${fmtDuration(t.retry.max_backoff_ms)}`],
      ['Repeat', t.repeat ? (t.repeat.cron ? t.repeat.cron + ' (' + (t.repeat.tz || 'UTC') + ')'
                                          : 'every ' + fmtDuration(t.repeat.every_ms)) : 'one-shot'],
    ];
    if (t.trace_id)
      items.push(['Trace id', t.trace_id]);
    dl.replaceChildren(...items.flatMap(([k, v]) => [el('dt', {}, k), el('dd', {}, v)]));
    const spec = {};
    for (const k of SPEC_KEYS)
      if (t[k] !== undefined)
        spec[k] = t[k];
    $('timer-spec').textContent = JSON.stringify(spec, null, 2);
    const rows = (t.attempt_history || []).map((a) => el('tr', {},
      el('td', {}, fmtTime(a.at)), el('td', {class: 'num', 'data-col': 'status'}, a.status === null ? '—' : a.status),
      el('td', {'data-col': 'error'}, a.error || '—'), el('td', {class: 'num'}, a.duration_ms + ' ms'),
      el('td', {class: 'mono'}, a.instance),
      el('td', {}, el('code', {class: 'snippet'}, a.response_snippet || ''))));
    fill($('attempts-table').tBodies[0], rows);
    show($('attempts-empty'), rows.length === 0);
    renderTimerActions(t);
  }

  // What a cancel or a pause of a recurring timer during its run does.
  const AFTER_RUN = {
    cancel: 'the run in progress completes; then it is cancelled.',
    pause: 'the run in progress completes; then no run follows until it is resumed or fired.',
  };

  function renderTimerActions(t) {
    const id = t.id;
    const path = '/timers/' + encodeURIComponent(id);
    const reload = () => loadTimer(id);
    const waiting = ['scheduled', 'retrying', 'paused'].includes(t.state);
    const defs = [
      ['fire', 'Fire now', waiting || (t.state === 'firing' && t.repeat), 'Run timer ' + id + ' now?',
       'Its next run is due now.', () => callOk('POST', path + '/fire', {})],
      ['pause', 'Pause', t.state === 'scheduled' || t.state === 'retrying' || (t.state === 'firing' && t.repeat),
       'Pause timer ' + id + '?', 'Nothing runs until it is resumed or fired.', () => callOk('POST', path + '/pause', {})],
      ['resume', 'Resume', t.state === 'paused', 'Resume timer ' + id + '?', 'It is due again.',
       () => callOk('POST', path + '/resume', {})],
      ['retry', 'Retry', t.state === 'failed', 'Retry dead letter ' + id + '?',
       'A new series of attempts starts now.', () => callOk('POST', path + '/retry', {})],
      ['cancel', 'Cancel', waiting || (t.state === 'firing' && t.repeat), 'Cancel timer ' + id + '?',
       'No attempt will start any more. This cannot be undone.', () => callOk('DELETE', path)],
    ];
    const box = $('timer-actions');
    box.replaceChildren(...defs.filter((d) => d[2]).map(([key, label, , title, text, fn]) =>
      el('button', {type: 'button', 'data-action': key, class: key === 'cancel' ? 'danger' : null,
                    'aria-label': label + ' timer ' + id,
                    onclick: async () => {
                      if (await confirmAction(title, text))
                        await act(label + ' ' + id, async () => {
                          const r = await fn();
                          // a recurring timer in a run stays firing until the run ends (a cancel
                          // answers 202): say what happens then, not just "now firing"
                          if (r && r.state === 'firing' && AFTER_RUN[key])
                            return label + ' ' + id + ': ' + AFTER_RUN[key];
                          return label + ' ' + id + ': now ' + (r && r.state ? r.state : 'done') + '.';
                        }, reload);
                    }}, label)));
  }

  /* ---- leases ---------------------------------------------------------- */

  async function loadLeases() {
    const seq = renderSeq;
    const res = await call('GET', '/leases');
    if (seq !== renderSeq)
      return;
    const note = $('leases-note');
    if (res.status !== 200) {
      note.textContent = res.status === 404 || res.status === 405
        ? 'List not available: this hookwheel has no GET /leases (an older version). Look a lease up by its key above.'
        : 'The leases could not be listed: ' + problemText(res);
      show(note, true);
      show($('leases-list'), false);
      show($('leases-empty'), false);
      return;
    }
    show(note, false);
    show($('leases-list'), true);
    const rows = (res.data.leases || []).map((l) => el('tr', {'data-key': l.key},
      el('th', {scope: 'row', class: 'mono'}, l.key), el('td', {}, l.owner),
      el('td', {class: 'num'}, l.token === null ? '—' : l.token),
      el('td', {class: 'num'}, l.expires_in_ms < 0 ? 'no expiry' : fmtDuration(l.expires_in_ms)),
      el('td', {}, l.renewing === undefined ? '—' : l.renewing ? 'yes' : 'no'),
      el('td', {}, fmtTime(l.last_heartbeat_at))));
    if (res.data.next_cursor)
      rows.push(el('tr', {}, el('td', {colspan: 6, class: 'muted'}, 'More leases are held than one page shows.')));
    fill($('leases-table').tBodies[0], rows);
    show($('leases-empty'), rows.length === 0);
  }

  async function leaseLookup(ev) {
    ev.preventDefault();
    const key = $('lease-key').value.trim();
    if (!key)
      return;
    await run(async () => {
      const res = await call('GET', '/leases/' + encodeURIComponent(key));
      const missing = $('lease-missing');
      if (res.status === 404) {
        missing.textContent = 'No lease is held under "' + key + '".';
        show(missing, true);
        show($('lease-found'), false);
        return;
      }
      if (res.status !== 200)
        throw new Error('GET /leases/' + key + ': ' + problemText(res));
      const l = res.data;
      show(missing, false);
      const items = [['Key', l.key], ['Owner', l.owner], ['Token', l.token === null ? '— (held outside hookwheel)' : l.token],
                     ['Time left', l.expires_in_ms < 0 ? 'no expiry' : fmtDuration(l.expires_in_ms)],
                     ['TTL', l.ttl_ms ? fmtDuration(l.ttl_ms) : '—'],
                     ['Renewing', l.renewing === undefined ? '—' : l.renewing ? 'yes' : 'no'],
                     ['Acquired', fmtTime(l.acquired_at)], ['Last heartbeat', fmtTime(l.last_heartbeat_at)],
                     ['Last renewed', fmtTime(l.last_renewed_at)]];
      if (l.probe_url)
        items.push(['Probe', l.probe_url], ['Last probe answered', fmtTime(l.last_probe_ok_at)]);
      $('lease-summary').replaceChildren(...items.flatMap(([k, v]) => [el('dt', {}, k), el('dd', {}, v)]));
      show($('lease-found'), true);
    });
  }

  /* ---- start ---------------------------------------------------------- */

  function start() {
    $('login-form').addEventListener('submit', login);
    $('logout').addEventListener('click', logout);
    $('list-form').addEventListener('submit', listSubmit);
    $('find-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      const id = $('find-id').value.trim();
      if (id)
        location.hash = '#/timers/' + encodeURIComponent(id);
    });
    $('page-next').addEventListener('click', () => {
      if (listNext) {
        listCursor = listNext;
        run(loadList);
      }
    });
    $('page-first').addEventListener('click', () => {
      listCursor = null;
      run(loadList);
    });
    $('lease-form').addEventListener('submit', leaseLookup);
    $('stats-form').addEventListener('submit', (ev) => ev.preventDefault());
    $('stats-queue').addEventListener('change', () => {
      statsQueue = $('stats-queue').value;
      run(loadOverview);
    });
    window.addEventListener('hashchange', route);
    // Charts are drawn to their box's width: draw them again after a resize.
    let resized = null;
    window.addEventListener('resize', () => {
      clearTimeout(resized);
      resized = setTimeout(() => {
        if (!$('view-overview').hidden)
          run(loadOverview);
      }, 150);
    });
    route();
  }

  start();
})();
