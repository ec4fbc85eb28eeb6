// The inbox's one script: the inbox table follows the runs (its JSON every 2 s). Everything
// from outside goes into the page as text (textContent), never as HTML.
"use strict";

const POLL_MS = 2000;

function cell(row, text) {
  const td = document.createElement("td");
  td.textContent = text;
  row.appendChild(td);
  return td;
}

function itemRow(item) {
  const row = document.createElement("tr");
  row.className = "item " + item.kind;
  cell(row, item.waited);
  cell(row, item.kind_name);
  const link = document.createElement("a");
  link.href = item.href; // the inbox's own path, built by the server
  link.textContent = item.workflow_id;
  cell(row, "").appendChild(link);
  cell(row, item.task);
  cell(row, item.tool);
  cell(row, item.approvers.join(", ") || (item.kind === "approval" ? "anyone" : ""));
  cell(row, item.tenant);
  cell(row, item.text);
  return row;
}

async function poll(table) {
  try {
    const response = await fetch(table.dataset.poll, {credentials: "same-origin"});
    if (response.ok) {
      const data = await response.json();
      const body = document.getElementById("items");
      body.replaceChildren(...data.items.map(itemRow));
      document.getElementById("counts").textContent = data.counts;
    }
  } catch (error) {
    // the inbox is restarting or the network is down: the next poll tries again
  }
  setTimeout(() => poll(table), POLL_MS);
}

document.addEventListener("DOMContentLoaded", () => {
  const table = document.getElementById("inbox");
  if (table) {
    setTimeout(() => poll(table), POLL_MS);
  }
});
