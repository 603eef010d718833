// agctl conversation page: search the messages, fold or unfold every tool call and result.
"use strict";
(function () {
  var data = JSON.parse(document.getElementById("agctl-data").textContent);
  var articles = document.querySelectorAll("article.message");
  var count = document.getElementById("match-count");

  function haystack(entry) {
    var parts = [entry.role, entry.name || "", entry.text || "", entry.reasoning || ""];
    (entry.tool_calls || []).forEach(function (call) {
      parts.push(call.name, call.arguments || "");
    });
    return parts.join("\n").toLowerCase();
  }
  var texts = data.messages.map(haystack);

  document.getElementById("search").addEventListener("input", function (event) {
    var needle = event.target.value.toLowerCase();
    var shown = 0;
    articles.forEach(function (article, index) {
      var hit = !needle || texts[index].indexOf(needle) >= 0;
      article.classList.toggle("hidden", !hit);
      if (hit) shown += 1;
    });
    count.textContent = needle ? shown + " of " + articles.length + " messages" : "";
  });

  function fold(open) {
    document.querySelectorAll("article.message details").forEach(function (details) {
      details.open = open;
    });
  }
  document.getElementById("unfold").addEventListener("click", function () { fold(true); });
  document.getElementById("fold").addEventListener("click", function () { fold(false); });
})();
