// The inbox's one script: the inbox table follows the runs (its rows every 2 s, as the
// server's template renders them), a running run's page shows what the run does as it happens
// (the inbox's server-sent events, one subscription per run on the server), and, where the
// workers take only signed decisions, each action (a decision, an answer, an operator's word
// on an unknown write, a cancel) is signed here with the person's Ed25519
// key (WebCrypto; imported non-extractable and kept in IndexedDB, so the inbox server never
// holds it). What the script itself shows from outside goes in as text (textContent, text
// nodes), never as HTML.
"use strict";

const POLL_MS = 2000;

async function poll(inbox) {
  try {
    const response = await fetch(inbox.dataset.poll, {credentials: "same-origin"});
    if (response.ok) {
      // The rows as the server renders them (the page's own template: text is escaped
      // there); a parsed document runs nothing.
      const fresh = new DOMParser().parseFromString(await response.text(), "text/html");
      document.getElementById("items").replaceChildren(...fresh.getElementById("items").rows);
      document.getElementById("counts").textContent = fresh.getElementById("counts").textContent;
    }
  } catch (error) {
    // the inbox is restarting or the network is down: the next poll tries again
  }
  setTimeout(() => poll(inbox), POLL_MS);
}

// --- a run as it happens ------------------------------------------------------------------

function entry(log, kind, text) {
  const item = document.createElement("li");
  item.className = kind;
  item.textContent = text;
  log.appendChild(item);
  return item;
}

function preview(item, text) {
  const shown = document.createElement("pre");
  shown.textContent = text;
  item.appendChild(shown);
}

function showEvent(log, texts, event) {
  const turn = `turn ${event.turn}`;
  switch (event.kind) {
    case "text": {
      let text = texts.get(event.turn);
      if (!text) {
        const item = entry(log, "text", turn);
        text = document.createElement("pre");
        item.appendChild(text);
        texts.set(event.turn, text);
      }
      text.append(event.delta || ""); // a text node: the model's words are never markup
      break;
    }
    case "retry": {
      const text = texts.get(event.turn);
      if (text) {
        text.replaceChildren(); // superseded: the retried call's text comes again
      }
      entry(log, "retry", `${turn}: the model call is tried again (attempt ${event.attempt})`);
      break;
    }
    case "call":
      entry(log, "call", `${turn}: call ${event.call_id}: ${event.tool}`);
      texts.delete(event.turn); // text after the calls starts a new block
      break;
    case "result": {
      const item = entry(log, "result", `${event.call_id}: ${event.status}`);
      if (event.preview) {
        preview(item, event.preview);
      }
      break;
    }
    case "waiting": {
      const calls = (event.call_ids || []).join(", ");
      entry(log, "waiting", `waiting for a person: ${event.reason} ${calls}`);
      break;
    }
    case "resumed":
      entry(log, "resumed", `resumed (${event.reason})`);
      break;
    case "fallback":
      entry(log, "fallback", `${turn}: ${event.stop_reason}`);
      break;
    case "continued":
      entry(log, "continued", "continued as new");
      break;
    case "done": {
      entry(log, "done", `ended: ${event.status} (${event.stop_reason})`);
      break;
    }
    case "truncated":
      entry(log, "truncated", event.stop_reason || "earlier items are no longer kept");
      break;
    default:
      break; // a kind this page does not know: display only, so nothing is lost
  }
}

// What the run's state says (the header, what it waits for, the ledger, the outcome) is
// rendered by the server from `status`; when the stream says that state changed, this page is
// fetched again and both parts put in as rendered, so the header and the live section agree
// without a reload. Parts whose state reads the same (`data-state`: execution, phase, turn,
// what waits, the ledger's statuses) are left alone; a part put in again keeps what a person
// was writing for a call that still waits (`typedIn`).
const STATE_PARTS = ["run-head", "run-body"];
const STATE_CHANGES = new Set(["waiting", "resumed", "continued", "done"]);
let refreshing = false;
let again = false;

async function refreshState(page) {
  const response = await fetch(page, {credentials: "same-origin"});
  if (!response.ok) {
    return;
  }
  const fresh = new DOMParser().parseFromString(await response.text(), "text/html");
  if (signing) {
    return; // the form being signed goes as it is; the page it brings back is fresh
  }
  for (const id of STATE_PARTS) {
    const shown = document.getElementById(id);
    const now = fresh.getElementById(id);
    if (shown && now && shown.dataset.state !== now.dataset.state) {
      const typed = typedIn(shown);
      shown.replaceChildren(...now.childNodes);
      shown.dataset.state = now.dataset.state;
      typeBackIn(shown, typed);
    }
  }
}

// What a person is writing for a call that still waits survives the page's refresh: the
// fields they typed in and the parts they opened (an edit, a response), by call and name.
function typedIn(part) {
  const typed = new Map();
  for (const box of part.querySelectorAll("[data-call]")) {
    for (const opened of box.querySelectorAll("details[open]")) {
      typed.set(`${box.dataset.call} details.${opened.className}`, true);
    }
    for (const field of box.querySelectorAll("textarea, input:not([type=hidden]):not([type=file])")) {
      typed.set(`${box.dataset.call} ${field.name}`, field.value);
    }
  }
  return typed;
}

function typeBackIn(part, typed) {
  for (const box of part.querySelectorAll("[data-call]")) {
    for (const details of box.querySelectorAll("details")) {
      details.open = typed.has(`${box.dataset.call} details.${details.className}`) || details.open;
    }
    for (const field of box.querySelectorAll("textarea, input:not([type=hidden]):not([type=file])")) {
      const value = typed.get(`${box.dataset.call} ${field.name}`);
      if (value !== undefined) {
        field.value = value;
      }
    }
  }
}

async function stateChanged(page) {
  // A burst of changes is one fetch, and one more if any came during it.
  if (refreshing) {
    again = true;
    return;
  }
  refreshing = true;
  do {
    again = false;
    try {
      await refreshState(page);
    } catch (error) {
      // the inbox is restarting or the network is down: the next change fetches again
    }
  } while (again);
  refreshing = false;
}

function follow(section) {
  const log = document.getElementById("live-log");
  const status = document.getElementById("live-status");
  const texts = new Map(); // turn -> the <pre> its text goes on in
  // EventSource sends the id of the last event it got (the stream offset) when it
  // reconnects, and the server goes on from there.
  const source = new EventSource(section.dataset.events);
  source.onopen = () => {
    status.textContent = "live";
  };
  source.onerror = () => {
    status.textContent = source.readyState === EventSource.CLOSED
      ? "no live updates: reload the page"
      : "reconnecting…";
  };
  source.onmessage = (message) => {
    let event;
    try {
      event = JSON.parse(message.data);
    } catch (error) {
      return;
    }
    showEvent(log, texts, event);
    if (STATE_CHANGES.has(event.kind)) {
      stateChanged(section.dataset.page);
    }
  };
  source.addEventListener("end", (message) => {
    source.close();
    let said = "live updates ended";
    try {
      said = JSON.parse(message.data).text;
    } catch (error) {
      // keep the plain words
    }
    status.textContent = said;
    stateChanged(section.dataset.page);
  });
}

// --- signed decisions ---------------------------------------------------------------------

const KEY_DB = "agentloop-inbox";
const KEY_STORE = "approver-keys";

function keyStore(mode, use) {
  return new Promise((resolve, reject) => {
    const opening = indexedDB.open(KEY_DB, 1);
    opening.onupgradeneeded = () => opening.result.createObjectStore(KEY_STORE);
    opening.onerror = () => reject(opening.error);
    opening.onsuccess = () => {
      const tx = opening.result.transaction(KEY_STORE, mode);
      const request = use(tx.objectStore(KEY_STORE));
      tx.oncomplete = () => resolve(request.result);
      tx.onerror = () => reject(tx.error);
    };
  });
}

function bytesOf(base64) {
  const raw = atob(base64);
  const bytes = new Uint8Array(raw.length);
  for (let i = 0; i < raw.length; i++) {
    bytes[i] = raw.charCodeAt(i);
  }
  return bytes;
}

function base64Of(buffer) {
  let raw = "";
  for (const byte of new Uint8Array(buffer)) {
    raw += String.fromCharCode(byte);
  }
  return btoa(raw);
}

function meta(name) {
  const found = document.querySelector(`meta[name="${name}"]`);
  return found ? found.content : "";
}

function problem(text) {
  const shown = document.getElementById("sign-problem");
  shown.textContent = text;
  shown.hidden = !text;
}

async function importKey(input) {
  // The PKCS#8 PEM `agentloop keys new` writes.
  const pem = await input.files[0].text();
  const body = pem.replace(/-----(BEGIN|END) PRIVATE KEY-----/g, "").replace(/\s+/g, "");
  const key = await crypto.subtle.importKey(
    "pkcs8", bytesOf(body), {name: "Ed25519"}, false, ["sign"]);
  await keyStore("readwrite", (store) => store.put(key, meta("inbox-user")));
  input.value = "";
  await showKey();
}

async function showKey() {
  const key = await keyStore("readonly", (store) => store.get(meta("inbox-user")));
  document.getElementById("key-status").textContent = key
    ? `${meta("inbox-user")}'s key is in this browser (it cannot be read out of it)`
    : `no key of ${meta("inbox-user")}'s in this browser yet`;
  return key;
}

function hidden(form, name, value) {
  const input = document.createElement("input");
  input.type = "hidden";
  input.name = name;
  input.value = value;
  form.appendChild(input);
}

let signing = false; // a form being signed is not put in again under the script (`refreshState`)

async function signAndSend(form, submitter) {
  signing = true;
  try {
    await signAndSubmit(form, submitter);
  } finally {
    signing = false;
  }
}

async function signAndSubmit(form, submitter) {
  const key = await showKey();
  if (!key) {
    problem("load your key file first: in signed mode only what is signed counts");
    return;
  }
  // The button pressed says what is decided (Approve/Reject, Applied/Not applied): it is
  // signed with the rest of the form, and sent with it.
  const fields = new FormData(form);
  if (submitter && submitter.name) {
    fields.set(submitter.name, submitter.value);
  }
  const response = await fetch(form.dataset.sign, {method: "POST", body: fields});
  if (!response.ok) {
    problem(`the inbox would not prepare the signature (HTTP ${response.status})`);
    return;
  }
  const prepared = await response.json();
  const signature = await crypto.subtle.sign({name: "Ed25519"}, key, bytesOf(prepared.message));
  if (submitter && submitter.name) {
    hidden(form, submitter.name, submitter.value);
  }
  hidden(form, "expires_at", prepared.expires_at);
  hidden(form, "signature", base64Of(signature));
  form.submit();
}

document.addEventListener("submit", (event) => {
  const form = event.target;
  if (!form.dataset.sign) {
    return;
  }
  event.preventDefault();
  signAndSend(form, event.submitter).catch((error) => problem(`not signed: ${error}`));
});

document.addEventListener("DOMContentLoaded", () => {
  const inbox = document.getElementById("inbox");
  if (inbox) {
    setTimeout(() => poll(inbox), POLL_MS);
  }
  const live = document.getElementById("live");
  if (live) {
    follow(live);
  }
  const keyFile = document.getElementById("key-file");
  if (keyFile) {
    keyFile.addEventListener("change", () => {
      importKey(keyFile).catch((error) => problem(`the key was not imported: ${error}`));
    });
    showKey().catch((error) => problem(`no key store in this browser: ${error}`));
  }
});

