// agctl session graph page: click a slot or checkpoint to see its messages, two checkpoints
// of a session to diff them; search; collapse a session to its node.
"use strict";
(function () {
  var data = JSON.parse(document.getElementById("agctl-data").textContent);
  var details = data.details || {};
  var messages = details.messages || [];
  var panel = document.getElementById("panel");
  var svg = document.getElementById("graph");
  var byId = new Map();
  data.graph.nodes.forEach(function (node) { byId.set(node.id, node); });
  var drawn = new Map();
  svg.querySelectorAll("g.node").forEach(function (g) { drawn.set(g.dataset.node, g); });
  var get = function (object, key) {  // own keys only: an id may be "__proto__"
    return object && Object.prototype.hasOwnProperty.call(object, key) ? object[key] : undefined;
  };
  var ZONES = ["immutable", "compressed", "messages"];

  // Python guessed each name's and label's width; the font is known only here: shorten,
  // with an ellipsis, what is wider than the room its layout gave it.
  svg.querySelectorAll("text[data-room]").forEach(function (label) {
    var room = Number(label.getAttribute("data-room"));
    if (label.getComputedTextLength() <= room) return;
    var chars = Array.from(label.textContent.replace(/\u2026$/, ""));
    while (chars.length && label.getComputedTextLength() > room) {
      chars.pop();
      label.textContent = chars.join("") + "\u2026";
    }
  });

  function el(tag, className, text) {
    var element = document.createElement(tag);
    if (className) element.className = className;
    if (text !== undefined && text !== null) element.textContent = text;
    return element;
  }

  function userText(value, tag) {
    if (value === null || value === undefined) return el(tag || "div", "redacted", "(text redacted)");
    var element = el(tag || "div", "user-text", value);
    element.dir = "auto";
    return element;
  }

  function fold(summary, content) {
    var details = el("details");
    details.appendChild(el("summary", null, summary));
    details.appendChild(content);
    return details;
  }

  function messageView(entry) {
    var article = el("article", "message role-" + entry.role);
    var facts = [entry.role + (entry.name ? " " + entry.name : ""), entry.tokens + " tokens"];
    if (entry.model) facts.push(entry.model);
    article.appendChild(el("header", null, facts.join(" · ")));
    if (entry.reasoning) article.appendChild(fold("reasoning", userText(entry.reasoning)));
    if (entry.role === "tool") {
      article.appendChild(fold("tool result for " + (entry.tool_call_id || ""), userText(entry.text, "pre")));
    } else if (entry.text !== "") {
      article.appendChild(userText(entry.text));
    }
    (entry.tool_calls || []).forEach(function (call) {
      article.appendChild(fold("→ tool call " + call.name + " (" + call.id + ")", userText(call.arguments, "pre")));
    });
    return article;
  }

  function showMessages(title, indices) {
    panel.appendChild(el("h3", null, title + " (" + indices.length + ")"));
    indices.forEach(function (index) { panel.appendChild(messageView(messages[index])); });
  }

  // A checkpoint's slots: the chains of the log's message nodes, rebuilt from the session's
  // first drawn checkpoint on (each gives only the slots that changed).
  var order = new Map();
  Object.keys(details.checkpoints || {}).forEach(function (id) {
    var log = details.checkpoints[id].log;
    if (!order.has(log)) order.set(log, []);
    order.get(log).push(id);
  });
  var states = new Map();
  function chain(log, tip, count) {
    var nodes = get(details.logs, log) || {};
    var found = [];
    var offset = tip;
    while (found.length < count) {
      var node = get(nodes, String(offset));
      if (!node) break;
      found.push(node[1]);
      offset = node[0];
    }
    return found.reverse();
  }
  function stateOf(id) {
    if (states.has(id)) return states.get(id);
    var log = details.checkpoints[id].log;
    var slots = new Map();
    order.get(log).forEach(function (each) {
      var record = details.checkpoints[each];
      slots = new Map(slots);
      record.deleted.forEach(function (slot) { slots.delete(slot); });
      record.changed.forEach(function (pair) {
        slots.set(pair[0], pair[1].map(function (zone) { return chain(log, zone[0], zone[1]); }));
      });
      states.set(each, { slots: slots, turn: record.turn, slot: record.slot, current_slot: record.current_slot });
    });
    return states.get(id);
  }

  // Added, removed and changed messages of one zone, as `ckpt diff` counts them (a longest
  // common subsequence of the messages; equal runs of removed and added are "changed").
  function zoneDiff(old, now) {
    var start = 0;
    while (start < old.length && start < now.length && old[start] === now[start]) start++;
    var endOld = old.length, endNew = now.length;
    while (endOld > start && endNew > start && old[endOld - 1] === now[endNew - 1]) { endOld--; endNew--; }
    var a = old.slice(start, endOld), b = now.slice(start, endNew);
    var ops = [];
    if (a.length * b.length > 4000000) {
      a.forEach(function (m, i) { ops.push(["-", start + i, m]); });
      b.forEach(function (m, j) { ops.push(["+", start + j, m]); });
    } else {
      var table = [];
      for (var i = 0; i <= a.length; i++) table.push(new Uint32Array(b.length + 1));
      for (i = a.length - 1; i >= 0; i--)
        for (var j = b.length - 1; j >= 0; j--)
          table[i][j] = a[i] === b[j] ? table[i + 1][j + 1] + 1 : Math.max(table[i + 1][j], table[i][j + 1]);
      i = 0; j = 0;
      var removed = [], added = [];
      var flush = function () {
        if (removed.length === added.length) {
          removed.forEach(function (r, k) { ops.push(["~", added[k][0], r[1], added[k][1]]); });
        } else {
          removed.forEach(function (r) { ops.push(["-", r[0], r[1]]); });
          added.forEach(function (n) { ops.push(["+", n[0], n[1]]); });
        }
        removed = []; added = [];
      };
      while (i < a.length || j < b.length) {
        if (i < a.length && j < b.length && a[i] === b[j]) { flush(); i++; j++; }
        else if (j < b.length && (i === a.length || table[i][j + 1] >= table[i + 1][j])) { added.push([start + j, b[j]]); j++; }
        else { removed.push([start + i, a[i]]); i++; }
      }
      flush();
    }
    return ops;
  }

  function preview(index) {
    var entry = messages[index];
    var text = entry.text;
    if (text === null) return "(text redacted)";
    if (!text && entry.tool_calls) text = entry.tool_calls.map(function (c) { return c.name + "()"; }).join(", ");
    text = String(text).split(/\s+/).join(" ").trim();
    return text.length <= 70 ? text : text.slice(0, 69) + "…";
  }

  function showDiff(fromId, toId) {
    var a = stateOf(fromId), b = stateOf(toId);
    var name = function (id) { return byId.get(id).checkpoint; };
    panel.appendChild(el("h3", null, "diff from " + name(fromId) + " to " + name(toId)));
    var lines = [];
    var line = function (kind, value) { lines.push([kind, value]); };
    a.slots.forEach(function (_, slot) { if (!b.slots.has(slot)) line("removed", "slot deleted: " + slot); });
    b.slots.forEach(function (_, slot) { if (!a.slots.has(slot)) line("added", "slot created: " + slot); });
    Array.from(b.slots.keys()).sort().forEach(function (slot) {
      if (!a.slots.has(slot)) return;
      ZONES.forEach(function (zone, z) {
        var ops = zoneDiff(a.slots.get(slot)[z], b.slots.get(slot)[z]);
        if (!ops.length) return;
        line("", "slot " + slot + " · " + zone + ":");
        ops.forEach(function (op) {
          var role = function (index) { return messages[index].role; };
          if (op[0] === "~") line("changed", "~ [" + op[1] + "] " + role(op[3]) + ": " + preview(op[2]) + " → " + preview(op[3]));
          else line(op[0] === "+" ? "added" : "removed", op[0] + " [" + op[1] + "] " + role(op[2]) + ": " + preview(op[2]));
        });
      });
    });
    if (a.current_slot !== b.current_slot) line("changed", "current slot: " + a.current_slot + " → " + b.current_slot);
    if (a.turn !== b.turn) line("changed", "turns: " + a.turn + " → " + b.turn);
    if (!lines.length) line("", "no change");
    lines.forEach(function (pair) { panel.appendChild(el("div", "diff-line diff-" + pair[0], pair[1])); });
  }

  var selected = null, marked = null;
  function select(id) {
    if (selected) drawn.get(selected).classList.remove("selected");
    selected = id;
    drawn.get(id).classList.add("selected");
    var node = byId.get(id);
    panel.textContent = "";
    panel.dataset.node = id;
    if (node.kind === "slot") {
      panel.appendChild(el("h2", null, "slot " + node.slot + " · session " + node.session));
      panel.appendChild(el("p", "meta", node.mode + " · " + node.messages + " messages · " + node.tokens + " tokens" + (node.current ? " · current" : "")));
      var zones = get(details.slots, id);
      if (!zones) { panel.appendChild(el("p", "muted", "(no messages in this page)")); return; }
      ZONES.forEach(function (zone, z) { if (zones[z].length || zone === "messages") showMessages(zone, zones[z]); });
    } else if (node.kind === "checkpoint") {
      panel.appendChild(el("h2", null, "checkpoint " + node.checkpoint + " · session " + node.session));
      panel.appendChild(el("p", "meta", "turn " + node.turn + (node.checkpoint_label ? " · " + node.checkpoint_label : "") + (node.auto ? " · automatic" : "")));
      if (!get(details.checkpoints, id)) { panel.appendChild(el("p", "muted", "(no messages in this page)")); return; }
      var state = stateOf(id);
      if (marked && marked !== id && details.checkpoints[marked].log === details.checkpoints[id].log) {
        showDiff(marked, id);
      } else {
        panel.appendChild(el("p", "muted", "Click another checkpoint of this session to diff it with this one."));
      }
      if (!marked || marked === id || details.checkpoints[marked].log !== details.checkpoints[id].log) {
        if (marked) drawn.get(marked).classList.remove("marked");
        marked = id;
        drawn.get(id).classList.add("marked");
      } else {
        drawn.get(marked).classList.remove("marked");
        marked = null;
      }
      var slot = state.slot;
      if (state.slots.has(slot)) showMessages("slot " + slot + " at this checkpoint", [].concat.apply([], state.slots.get(slot)));
    } else {
      toggle(id);
      panel.appendChild(el("h2", null, "session " + node.session));
      if (node.title) panel.appendChild(el("p", null, node.title));
      panel.appendChild(el("p", "meta", (node.missing ? "gone · " : "") + (node.orphan ? "orphan · " : "") + (node.current ? "current · " : "") + (collapsed.has(id) ? "collapsed (click to expand)" : "click to collapse")));
    }
  }

  var collapsed = new Set();
  function apply() {
    var hidden = function (id) {
      var g = drawn.get(id);
      return g && byId.get(id).kind !== "session" && collapsed.has(g.dataset.band);
    };
    drawn.forEach(function (g, id) { g.classList.toggle("collapsed", hidden(id)); });
    svg.querySelectorAll("path.edge").forEach(function (path) {
      path.classList.toggle("collapsed", hidden(path.dataset.from) || hidden(path.dataset.to));
    });
    svg.querySelectorAll(".lane").forEach(function (lane) {
      lane.classList.toggle("collapsed", collapsed.has(lane.dataset.band));
    });
  }
  function toggle(id) {
    if (collapsed.has(id)) collapsed.delete(id); else collapsed.add(id);
    apply();
  }
  document.getElementById("collapse").addEventListener("click", function () {
    data.graph.nodes.forEach(function (node) { if (node.kind === "session") collapsed.add(node.id); });
    apply();
  });
  document.getElementById("expand").addEventListener("click", function () { collapsed.clear(); apply(); });

  drawn.forEach(function (g, id) {
    g.addEventListener("click", function () { select(id); });
    g.addEventListener("keydown", function (event) {
      if (event.key === "Enter" || event.key === " ") { event.preventDefault(); select(id); }
    });
  });

  // Search: names, titles, labels and (unless redacted) the text of a slot's messages.
  var haystacks = new Map();
  byId.forEach(function (node, id) {
    var parts = [node.label, node.session, node.slot || "", node.title || "", node.checkpoint || "", node.checkpoint_label || ""];
    var zones = get(details.slots, id);
    if (zones) zones.forEach(function (zone) { zone.forEach(function (index) { parts.push(messages[index].text || ""); }); });
    haystacks.set(id, parts.join("\n").toLowerCase());
  });
  var count = document.getElementById("match-count");
  document.getElementById("search").addEventListener("input", function (event) {
    var needle = event.target.value.toLowerCase();
    var hits = 0;
    drawn.forEach(function (g, id) {
      var hit = needle !== "" && haystacks.get(id).indexOf(needle) >= 0;
      if (hit) hits++;
      g.classList.toggle("match", hit);
      g.classList.toggle("dim", needle !== "" && !hit);
    });
    count.textContent = needle ? hits + " match" + (hits === 1 ? "" : "es") : "";
  });
})();
