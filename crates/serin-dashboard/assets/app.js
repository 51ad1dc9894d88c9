// Serin's dashboard: draws the list of releases and a release's page from one server-sent event
// stream (a snapshot, then each change), and sends the manual requests. Every text is set with
// textContent: nothing a Canary holds is ever parsed as HTML.
'use strict';

const state = {
  me: null,
  canaries: new Map(),
  hidden: false,
  live: false,
  pending: null,
  details: null,
  detailsFor: null,
  images: new Map(),
  drawQueued: false,
};

const HANDLED_FIELD = {
  promote: 'promote', 'promote-full': 'promoteFull', abort: 'abort', retry: 'retry', restart: 'restart',
};

const ACTIONS = [
  { id: 'promote', label: 'Promote', title: 'Promote', text: 'Leave the pause or promotion gate and go on with the release of {name}.' },
  { id: 'promote-full', label: 'Promote fully', title: 'Promote fully', text: 'Skip the remaining steps and checks: {name} is promoted to the primary at once.' },
  { id: 'abort', label: 'Abort', title: 'Abort the release', text: 'Roll {name} back now: all traffic returns to the primary.', danger: true },
  { id: 'retry', label: 'Retry', title: 'Retry', text: 'Run the failed release of {name} again.' },
  { id: 'restart', label: 'Restart analysis', title: 'Restart the analysis', text: 'Run the analysis of the current revision of {name} again from the start.' },
  { id: 'pause', label: 'Pause', title: 'Pause', text: 'Suspend {name}: the operator leaves it as it is until resumed.' },
  { id: 'resume', label: 'Resume', title: 'Resume', text: 'Let the operator act on {name} again.' },
];

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name === 'class') node.className = value;
    else if (name === 'text') node.textContent = value;
    else if (name.startsWith('on')) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? '' : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function svg(tag, attrs, ...children) {
  const node = document.createElementNS('http://www.w3.org/2000/svg', tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value !== null && value !== undefined) node.setAttribute(name, value);
  }
  for (const child of children.flat()) if (child) node.append(child);
  return node;
}

const key = (c) => `${c.namespace}/${c.name}`;

function age(time) {
  if (!time) return '-';
  const seconds = Math.max(0, Math.round((Date.now() - Date.parse(time)) / 1000));
  if (seconds < 120) return `${seconds}s`;
  if (seconds < 7200) return `${Math.floor(seconds / 60)}m`;
  if (seconds < 172800) return `${Math.floor(seconds / 3600)}h`;
  return `${Math.floor(seconds / 86400)}d`;
}

function clock(time) {
  const date = new Date(time);
  return date.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', second: '2-digit' });
}

function stepText(c) {
  if (!c.ladder.length) return '-';
  const at = c.position === null ? 0 : Math.min(c.position + 1, c.ladder.length);
  return `${at}/${c.ladder.length}`;
}

function phaseBadge(phase) {
  return el('span', { class: `badge phase-${phase || 'none'}`, text: phase || 'New' });
}

function weightBar(weight, big) {
  const fill = el('span', { class: 'fill' });
  fill.style.width = `${Math.max(0, Math.min(100, weight))}%`;
  return el('div', { class: big ? 'weight big' : 'weight' },
    el('div', {
      class: 'bar', role: 'meter', 'aria-valuemin': '0', 'aria-valuemax': '100',
      'aria-valuenow': String(weight), 'aria-label': `${weight}% of traffic on the canary`,
    }, fill),
    el('span', { class: 'pct', text: `${weight}%` }));
}

function navigate(path) {
  history.pushState(null, '', path);
  route();
}

function link(path, ...children) {
  return el('a', {
    href: path,
    onclick: (event) => {
      if (event.metaKey || event.ctrlKey || event.shiftKey || event.button !== 0) return;
      event.preventDefault();
      navigate(path);
    },
  }, ...children);
}

function currentCanaryKey() {
  const match = location.pathname.match(/^\/canaries\/([^/]+)\/([^/]+)$/);
  return match ? `${decodeURIComponent(match[1])}/${decodeURIComponent(match[2])}` : null;
}

function queueDraw() {
  if (state.drawQueued) return;
  state.drawQueued = true;
  requestAnimationFrame(() => {
    state.drawQueued = false;
    draw();
  });
}

function draw() {
  const main = document.getElementById('main');
  const focused = document.activeElement && document.activeElement.id;
  const canary = currentCanaryKey();
  main.replaceChildren(canary ? drawCanary(canary) : drawList());
  if (focused && focused !== 'main') {
    const again = document.getElementById(focused);
    if (again) again.focus();
  }
}

function route() {
  state.details = null;
  state.detailsFor = null;
  const canary = currentCanaryKey();
  if (canary) loadDetails(canary);
  draw();
  document.getElementById('main').focus();
}

// ---- the list ----

function metricChips(c) {
  return c.metrics.map((m) => el('span', {
    class: `chip ${m.passed === false ? 'bad' : m.passed ? 'ok' : ''}`,
    title: `${m.name}: ${m.value === null ? 'no value' : m.value} (${m.range})`,
  }, m.name, ' ', el('b', { text: m.value === null ? '–' : formatValue(m.value) })));
}

function formatValue(value) {
  if (Math.abs(value) >= 1000 || Number.isInteger(value)) return String(Math.round(value * 100) / 100);
  return value.toPrecision(3);
}

function imagesOf(c) {
  const known = state.images.get(c.namespace);
  if (!known || !known.map) return '';
  const target = c.target.split('/')[1];
  const canary = known.map[target];
  const primary = known.map[`${target}-primary`];
  if (!canary && !primary) return '';
  if (primary && canary && primary !== canary) return `${shortImage(primary)} → ${shortImage(canary)}`;
  return shortImage(canary || primary);
}

function shortImage(image) {
  return image.split('/').pop();
}

function loadImages(namespace, revision) {
  const known = state.images.get(namespace);
  if (known && known.revisions.has(revision)) return;
  const entry = known || { map: null, revisions: new Set() };
  entry.revisions.add(revision);
  state.images.set(namespace, entry);
  fetch(`/api/namespaces/${encodeURIComponent(namespace)}/images`, { credentials: 'same-origin' })
    .then((r) => (r.ok ? r.json() : null))
    .then((images) => {
      if (images && !images.error) {
        entry.map = images;
        queueDraw();
      }
    })
    .catch(() => {});
}

function drawList() {
  const filter = (document.getElementById('filter') || {}).value || '';
  const canaries = [...state.canaries.values()]
    .filter((c) => !filter || key(c).includes(filter))
    .sort((a, b) => key(a).localeCompare(key(b)));
  for (const c of canaries) loadImages(c.namespace, c.revision || '');
  const rows = canaries.map((c) => el('tr', { 'data-canary': key(c), class: `row phase-${c.phase}` },
    el('td', { class: 'name' }, link(`/canaries/${encodeURIComponent(c.namespace)}/${encodeURIComponent(c.name)}`, c.name),
      el('span', { class: 'ns', text: c.namespace })),
    el('td', { class: 'phase' }, phaseBadge(c.phase), c.suspended ? el('span', { class: 'badge paused', text: 'paused' }) : null),
    el('td', { class: 'weight-cell' }, weightBar(c.weight)),
    el('td', { class: 'step', text: stepText(c) }),
    el('td', { class: `failed ${c.failedChecks > 0 ? 'bad' : ''}`, text: `${c.failedChecks}/${c.threshold}` }),
    el('td', { class: 'metrics' }, metricChips(c)),
    el('td', { class: 'images', text: imagesOf(c) }),
    el('td', { class: 'age', text: age(c.created) })));
  const count = state.canaries.size;
  return el('section', { class: 'list', 'aria-labelledby': 'list-title' },
    el('div', { class: 'title-row' },
      el('h1', { id: 'list-title' }, 'Releases ', el('small', { id: 'count', text: `${count} ${count === 1 ? 'Canary' : 'Canaries'}` })),
      el('input', {
        id: 'filter', type: 'search', placeholder: 'Filter namespace/name', value: filter,
        'aria-label': 'Filter by namespace and name', oninput: queueDraw,
      })),
    state.hidden ? el('p', { class: 'note', id: 'hidden-note', text: 'Some namespaces are hidden: you may not list their Canaries.' }) : null,
    count === 0 && state.live ? el('p', { class: 'empty', text: 'No Canaries you may see yet.' }) : null,
    el('table', { id: 'canaries' },
      el('thead', {}, el('tr', {},
        ...['Canary', 'Phase', 'Weight', 'Step', 'Failed', 'Metrics', 'Images', 'Age'].map((h) => el('th', { scope: 'col', text: h })))),
      el('tbody', {}, rows)));
}

// ---- one Canary ----

function loadDetails(canaryKey) {
  const [namespace, name] = canaryKey.split('/');
  fetch(`/api/canaries/${encodeURIComponent(namespace)}/${encodeURIComponent(name)}/details`, { credentials: 'same-origin' })
    .then(async (r) => ({ ok: r.ok, body: await r.json().catch(() => ({})) }))
    .then(({ ok, body }) => {
      if (currentCanaryKey() !== canaryKey) return;
      state.details = ok ? body : { error: body.error || 'cannot read the details' };
      state.detailsFor = canaryKey;
      queueDraw();
    })
    .catch(() => {});
}

function chart(metric) {
  const width = 560;
  const height = 170;
  const pad = { left: 48, right: 12, top: 12, bottom: 24 };
  const values = metric.points.map((p) => p.v);
  const bounds = [metric.min, metric.max].filter((v) => v !== null && v !== undefined);
  let low = Math.min(...values, ...bounds);
  let high = Math.max(...values, ...bounds);
  if (!Number.isFinite(low)) { low = 0; high = 1; }
  if (low === high) { low -= 1; high += 1; }
  const margin = (high - low) * 0.12;
  low -= margin;
  high += margin;
  const times = metric.points.map((p) => Date.parse(p.t));
  const first = Math.min(...times);
  const last = Math.max(...times);
  const x = (t) => (times.length < 2 || last === first
    ? pad.left + (width - pad.left - pad.right) / 2
    : pad.left + ((t - first) / (last - first)) * (width - pad.left - pad.right));
  const y = (v) => pad.top + (1 - (v - low) / (high - low)) * (height - pad.top - pad.bottom);
  const bandTop = metric.max !== null ? y(metric.max) : pad.top;
  const bandBottom = metric.min !== null ? y(metric.min) : height - pad.bottom;
  const parts = [
    svg('rect', { class: 'plot', x: pad.left, y: pad.top, width: width - pad.left - pad.right, height: height - pad.top - pad.bottom }),
  ];
  if (bounds.length) {
    parts.push(svg('rect', { class: 'band', x: pad.left, y: bandTop, width: width - pad.left - pad.right, height: Math.max(0, bandBottom - bandTop) }));
    for (const bound of bounds) {
      parts.push(svg('line', { class: 'threshold', x1: pad.left, x2: width - pad.right, y1: y(bound), y2: y(bound) }));
      const label = svg('text', { class: 'label', x: width - pad.right - 4, y: y(bound) - 4, 'text-anchor': 'end' });
      label.textContent = `${bound === metric.min ? 'min' : 'max'} ${bound}`;
      parts.push(label);
    }
  }
  for (const value of [high - margin, low + margin]) {
    const tick = svg('text', { class: 'tick', x: pad.left - 6, y: y(value) + 4, 'text-anchor': 'end' });
    tick.textContent = formatValue(value);
    parts.push(tick);
  }
  if (times.length) {
    const start = svg('text', { class: 'tick', x: pad.left, y: height - 6 });
    start.textContent = clock(first);
    const end = svg('text', { class: 'tick', x: width - pad.right, y: height - 6, 'text-anchor': 'end' });
    end.textContent = clock(last);
    parts.push(start, end);
    parts.push(svg('polyline', { class: 'line', points: metric.points.map((p) => `${x(Date.parse(p.t))},${y(p.v)}`).join(' ') }));
    for (const p of metric.points) {
      const title = svg('title');
      title.textContent = `${formatValue(p.v)} at ${clock(p.t)}${p.ok ? '' : ' (failed)'}`;
      parts.push(svg('circle', { class: `point ${p.ok ? 'ok' : 'bad'}`, cx: x(Date.parse(p.t)), cy: y(p.v), r: 4 }, title));
    }
  } else {
    const none = svg('text', { class: 'tick', x: width / 2, y: height / 2, 'text-anchor': 'middle' });
    none.textContent = 'no measurements yet';
    parts.push(none);
  }
  return svg('svg', {
    class: 'chart', viewBox: `0 0 ${width} ${height}`, role: 'img', 'data-metric': metric.name,
    'aria-label': `${metric.name}: ${metric.points.length} measurements against ${metric.range}`,
  }, parts);
}

function actionButtons(c) {
  const shown = ACTIONS.filter((a) => (a.id === 'pause' ? !c.suspended : a.id === 'resume' ? c.suspended : true));
  return el('div', { class: 'actions', id: 'actions', role: 'toolbar', 'aria-label': 'Actions' },
    shown.map((a) => el('button', {
      type: 'button', class: a.danger ? 'danger' : 'secondary', 'data-action': a.id,
      onclick: () => confirmAction(c, a),
    }, a.label)));
}

function confirmAction(c, action) {
  const dialog = document.getElementById('confirm');
  document.getElementById('confirm-title').textContent = `${action.title}: ${c.namespace}/${c.name}?`;
  document.getElementById('confirm-text').textContent = action.text.replace('{name}', c.name);
  const ok = document.getElementById('confirm-ok');
  ok.textContent = action.label;
  ok.className = action.danger ? 'danger' : 'primary';
  dialog.returnValue = '';
  dialog.onclose = () => {
    if (dialog.returnValue === 'ok') send(c, action.id);
  };
  dialog.showModal();
  document.getElementById('confirm-cancel').focus();
}

function setActionStatus(text, kind) {
  state.actionStatus = { text, kind };
  const node = document.getElementById('action-status');
  if (node) {
    node.textContent = text;
    node.className = `action-status ${kind}`;
  }
}

async function send(c, action) {
  setActionStatus(`Sending ${action}…`, 'busy');
  let response;
  try {
    response = await fetch(`/api/canaries/${encodeURIComponent(c.namespace)}/${encodeURIComponent(c.name)}/actions/${action}`, {
      method: 'POST', credentials: 'same-origin', headers: { 'X-Serin-CSRF': state.me.csrf },
    });
  } catch (error) {
    setActionStatus(`The ${action} could not be sent: ${error}`, 'error');
    return;
  }
  const body = await response.json().catch(() => ({}));
  if (!response.ok) {
    setActionStatus(`Refused: ${body.error || response.statusText}`, 'error');
    return;
  }
  state.pending = { key: key(c), action, token: body.token, kind: body.kind };
  setActionStatus(`${action} requested; waiting for the operator to act on it…`, 'busy');
  acknowledge(state.canaries.get(key(c)));
}

function acknowledge(c) {
  const pending = state.pending;
  if (!pending || !c || key(c) !== pending.key) return;
  let done = false;
  if (pending.kind) done = c.handled && c.handled[HANDLED_FIELD[pending.kind]] === pending.token;
  else done = c.suspended === (pending.action === 'pause');
  if (done) {
    state.pending = null;
    setActionStatus(`${pending.action} acknowledged by the operator: now ${c.phase}${c.suspended ? ', paused' : ''}.`, 'done');
  }
}

function section(title, id, ...children) {
  return el('section', { class: 'card', id, 'aria-labelledby': `${id}-title` }, el('h2', { id: `${id}-title`, text: title }), ...children);
}

function drawCanary(canaryKey) {
  const c = state.canaries.get(canaryKey);
  const back = link('/', '← All releases');
  if (!c) {
    return el('section', { class: 'detail' }, el('nav', { class: 'crumbs' }, back),
      el('h1', { text: canaryKey }), el('p', { class: 'empty', text: state.live ? 'No such Canary, or you may not see it.' : 'Loading…' }));
  }
  const details = state.detailsFor === canaryKey ? state.details : null;
  const ladder = el('ol', { class: 'ladder', id: 'ladder' }, c.ladder.map((rung, i) => el('li', {
    class: i === c.position ? 'current' : c.position !== null && i < c.position ? 'done' : '',
    'aria-current': i === c.position ? 'step' : null,
  }, rung)));
  const metrics = c.metrics.map((m) => el('div', { class: `metric ${m.passed === false ? 'bad' : ''}`, 'data-metric': m.name },
    el('div', { class: 'metric-head' },
      el('h3', { text: m.name }),
      el('span', { class: 'value', text: m.value === null ? 'no value' : formatValue(m.value) }),
      el('span', { class: 'range', text: m.range }),
      el('span', { class: `verdict ${m.passed === false ? 'bad' : m.passed ? 'ok' : ''}`, text: m.passed === null ? 'not run yet' : m.passed ? 'ok' : 'failed' })),
    chart(m),
    el('p', { class: 'caption', text: m.points.length
      ? `${m.points.length} ${m.points.length === 1 ? 'measurement' : 'measurements'} this release · last ${formatValue(m.points[m.points.length - 1].v)} at ${clock(m.points[m.points.length - 1].t)}`
      : 'no measurements yet' }),
    m.message && m.passed === false ? el('p', { class: 'why', text: m.message }) : null));
  const gates = c.gates.length
    ? el('ul', { class: 'gates', id: 'gate-list' }, c.gates.map((g) => el('li', { class: g.holding ? 'holding' : '' },
      el('b', { text: g.name }), ` ${g.kind} `, el('span', { class: 'badge', text: g.holding ? 'holding the release' : 'open' }))))
    : el('p', { class: 'muted', text: 'No confirm gates.' });
  const status = state.actionStatus && state.pending && state.pending.key === canaryKey ? state.actionStatus : state.actionStatus || { text: '', kind: '' };
  return el('section', { class: 'detail', 'aria-labelledby': 'canary-title' },
    el('nav', { class: 'crumbs' }, back),
    el('div', { class: 'title-row' },
      el('h1', { id: 'canary-title' }, c.name, el('small', { text: ` ${c.namespace}` })),
      el('span', { id: 'phase' }, phaseBadge(c.phase)),
      c.suspended ? el('span', { class: 'badge paused', text: 'paused' }) : null),
    el('div', { class: 'summary' },
      el('div', { id: 'weight' }, weightBar(c.weight, true)),
      el('dl', {},
        el('dt', { text: 'Target' }), el('dd', { text: c.target }),
        el('dt', { text: 'Strategy' }), el('dd', { text: c.strategy }),
        el('dt', { text: 'Step' }), el('dd', { id: 'step', text: stepText(c) }),
        el('dt', { text: 'Failed checks' }), el('dd', { id: 'failed', text: `${c.failedChecks} of ${c.threshold}` }),
        el('dt', { text: 'Images' }), el('dd', { id: 'images' }, imagesDetail(details)),
        el('dt', { text: 'Age' }), el('dd', { text: age(c.created) }))),
    c.message ? el('p', { class: 'message', role: 'status', text: c.message }) : null,
    actionButtons(c),
    el('p', { id: 'action-status', class: `action-status ${status.kind}`, role: 'status', 'aria-live': 'polite', text: status.text }),
    section('Steps', 'steps', c.ladder.length ? ladder : el('p', { class: 'muted', text: 'No steps: a single analysis.' })),
    section('Metrics', 'metrics', metrics.length ? el('div', { class: 'metric-grid' }, metrics) : el('p', { class: 'muted', text: 'No metrics.' })),
    section('Gates', 'gates', gates),
    section('Routes in force', 'routes', routesDetail(details)),
    section('Events', 'events', eventsDetail(details)),
    c.conditions.length ? section('Conditions', 'conditions', el('ul', { class: 'conditions' }, c.conditions.map((k) => el('li', {},
      el('b', { text: `${k.kind}=${k.status}` }), ` ${k.reason}${k.message ? `: ${k.message}` : ''}`)))) : null);
}

function imagesDetail(details) {
  if (!details || !details.images) return '…';
  const { primary, canary } = details.images;
  if (primary && primary.error) return primary.error;
  const show = (v) => (v === null || v === undefined ? '-' : typeof v === 'string' ? v : v.error);
  return `${show(primary)} (primary) · ${show(canary)} (canary)`;
}

function routesDetail(details) {
  if (!details) return el('p', { class: 'muted', text: 'Loading…' });
  if (details.error) return el('p', { class: 'error', text: details.error });
  const routes = details.routes;
  if (!routes || routes.error) return el('p', { class: 'muted', text: routes ? routes.error : '-' });
  if (!routes.rules.length) return el('p', { class: 'muted', text: `${routes.kind} ${routes.name} does not exist (yet).` });
  return el('ul', { class: 'routes' }, routes.rules.map((rule) => el('li', {},
    el('b', { text: `${routes.kind} ${routes.name}${rule.name ? ` · ${rule.name}` : ''}${rule.match ? ' (matched requests)' : ''}` }),
    el('span', {}, rule.to.map((t) => el('span', { class: 'dest', text: t.weight === null || t.weight === undefined ? t.to : `${t.to} ${t.weight}%` }))),
    rule.mirror ? el('span', { class: 'dest', text: `mirror → ${rule.mirror}` }) : null)));
}

function eventsDetail(details) {
  if (!details) return el('p', { class: 'muted', text: 'Loading…' });
  if (details.error) return el('p', { class: 'error', text: details.error });
  const events = details.events;
  if (events.error) return el('p', { class: 'muted', text: events.error });
  if (!events.items.length) return el('p', { class: 'muted', text: 'No Events.' });
  return el('ol', { class: 'timeline', id: 'event-list' }, events.items.slice().reverse().map((e) => el('li', { class: e.type === 'Warning' ? 'warning' : '' },
    el('time', { datetime: e.time || '', text: e.time ? clock(e.time) : '' }),
    el('b', { text: e.reason || '' }), ' ', e.message || '', e.count > 1 ? el('span', { class: 'muted', text: ` ×${e.count}` }) : null)));
}

// ---- live feed, sign-in ----

function setLive(live) {
  state.live = live;
  const node = document.getElementById('live');
  node.textContent = live ? 'live' : 'reconnecting…';
  node.className = live ? 'live on' : 'live';
}

function connect() {
  const source = new EventSource('/api/stream');
  source.addEventListener('snapshot', (event) => {
    const data = JSON.parse(event.data);
    state.canaries = new Map(data.canaries.map((c) => [key(c), c]));
    state.hidden = data.hiddenNamespaces;
    setLive(true);
    queueDraw();
  });
  source.addEventListener('canary', (event) => {
    const c = JSON.parse(event.data);
    const before = state.canaries.get(key(c));
    state.canaries.set(key(c), c);
    acknowledge(c);
    if (currentCanaryKey() === key(c) && (!before || before.phase !== c.phase || before.weight !== c.weight || before.revision !== c.revision)) {
      loadDetails(key(c));
    }
    queueDraw();
  });
  source.addEventListener('deleted', (event) => {
    const gone = JSON.parse(event.data);
    state.canaries.delete(key(gone));
    queueDraw();
  });
  source.addEventListener('signed-out', (event) => {
    source.close();
    showLogin(event.data);
  });
  source.onerror = () => setLive(false);
}

function showLogin(reason) {
  if (location.pathname !== '/login') history.replaceState(null, '', `/login`);
  const error = el('p', { id: 'login-error', class: 'error', role: 'alert', text: reason && !/^sign in/i.test(reason) ? reason : '' });
  const token = el('textarea', { id: 'token', name: 'token', rows: '4', required: true, autocomplete: 'off', spellcheck: 'false', 'aria-describedby': 'token-help' });
  const form = el('form', {
    id: 'login', class: 'card login',
    onsubmit: async (event) => {
      event.preventDefault();
      error.textContent = '';
      const response = await fetch('/api/login', {
        method: 'POST', credentials: 'same-origin', headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ token: token.value }),
      });
      if (response.ok) {
        location.replace(sessionStorage.getItem('serin-after-login') || '/');
        return;
      }
      const body = await response.json().catch(() => ({}));
      error.textContent = body.error || response.statusText;
    },
  },
  el('h1', { text: 'Sign in' }),
  el('label', { for: 'token', text: 'Kubernetes token' }),
  token,
  el('p', { id: 'token-help', class: 'muted' }, 'The dashboard shows the Canaries you may list and lets you act where you may patch them, as Kubernetes decides for your token. Get one with ',
    el('code', { text: 'kubectl create token <serviceaccount> -n <namespace>' }), '. Behind an OIDC proxy you are signed in already.'),
  error,
  el('button', { type: 'submit', class: 'primary', id: 'sign-in' }, 'Sign in'));
  document.getElementById('main').replaceChildren(form);
  document.getElementById('live').textContent = '';
  token.focus();
}

async function start() {
  document.getElementById('logout').addEventListener('click', async () => {
    await fetch('/api/logout', { method: 'POST', credentials: 'same-origin', headers: { 'X-Serin-CSRF': state.me.csrf } });
    location.replace('/login');
  });
  window.addEventListener('popstate', route);
  const response = await fetch('/api/me', { credentials: 'same-origin' });
  if (response.status === 401) {
    if (location.pathname !== '/login') sessionStorage.setItem('serin-after-login', location.pathname);
    const body = await response.json().catch(() => ({}));
    showLogin(body.error);
    return;
  }
  if (!response.ok) {
    document.getElementById('main').replaceChildren(el('p', { class: 'error', text: `The dashboard cannot reach Kubernetes: ${await response.text()}` }));
    return;
  }
  state.me = await response.json();
  document.getElementById('viewer').textContent = state.me.user;
  document.getElementById('logout').hidden = !state.me.signedIn;
  if (location.pathname === '/login') history.replaceState(null, '', sessionStorage.getItem('serin-after-login') || '/');
  sessionStorage.removeItem('serin-after-login');
  connect();
  route();
  setInterval(queueDraw, 30000);
}

start();
