// The writers' page (/write). The page itself is a static shell; this script signs the writer in
// with their token, which it keeps in this tab's sessionStorage only, sends it as a Bearer header to
// the JSON API of this origin, and fills the page in. Every text from the API is put in with
// textContent, never as HTML. Errors are shown as sentences: the API's message and the field it
// names, never a raw body.
(function () {
  "use strict";

  var TOKEN_KEY = "dynaval.writer.token";
  var PAGE_SIZE = 20;
  var STATUS_TEXT = {
    scoring: "being scored",
    queued: "waiting for validation",
    not_fooled: "did not fool the model",
    in_validation: "in validation",
    escalated: "escalated: more votes asked",
    accepted: "accepted",
    rejected: "rejected",
    flagged: "flagged for a lead"
  };

  var state = {
    token: null,
    me: null,
    rounds: [],
    round: null,
    answer: null, // {prediction, probabilities, inputs: the inputs it answered, source: "ask"|"submit"}
    minePage: 0,
    mineShown: 0,
    busy: false,
    roundFacts: "", // the round's line of facts, before what its model reads
    pads: {}, // an image round's drawing pads, by input name (drawing.js)
    // epoch: bumped by a submission and a change of round, so that a live answer asked before it
    // (still in flight, or waiting for its turn) never replaces what the writer sees now.
    live: { wanted: false, timer: null, inFlight: false, last: 0, epoch: 0 }
  };
  // The live guess while drawing: at most one request at a time, and one per LIVE_GAP_MS.
  var LIVE_GAP_MS = 400;

  function $(id) {
    return document.getElementById(id);
  }

  function show(element, visible) {
    element.hidden = !visible;
  }

  function clear(element) {
    while (element.firstChild) element.removeChild(element.firstChild);
  }

  function make(tag, className, text) {
    var element = document.createElement(tag);
    if (className) element.className = className;
    if (text !== undefined && text !== null) element.textContent = text;
    return element;
  }

  function percent(p) {
    return (Math.round(p * 1000) / 10).toFixed(1) + "%";
  }

  function share(value) {
    return value === null || value === undefined ? "—" : percent(value);
  }

  function title(name) {
    return name.charAt(0).toUpperCase() + name.slice(1).replace(/_/g, " ");
  }

  // ------------------------------------------------------------------------------- the API

  function ApiError(status, code, message, field, retryAfter) {
    this.status = status;
    this.code = code;
    this.message = message;
    this.field = field;
    this.retryAfter = retryAfter;
  }

  function api(method, path, body) {
    var headers = { Authorization: "Bearer " + state.token, Accept: "application/json" };
    var init = { method: method, headers: headers, credentials: "omit", cache: "no-store" };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    return fetch(path, init).then(
      function (response) {
        return response.text().then(function (text) {
          var data = null;
          try {
            data = text ? JSON.parse(text) : null;
          } catch (ignored) {
            data = null;
          }
          if (response.ok && data !== null) return data;
          var error = data && typeof data.error === "object" && data.error !== null ? data.error : {};
          throw new ApiError(
            response.status,
            typeof error.code === "string" ? error.code : "",
            typeof error.message === "string" ? error.message : "",
            typeof error.field === "string" ? error.field : null,
            response.headers.get("Retry-After")
          );
        });
      },
      function () {
        throw new ApiError(0, "network", "", null, null);
      }
    );
  }

  function seconds(error) {
    var n = parseInt(error.retryAfter || "", 10);
    return isFinite(n) && n > 0 ? n : null;
  }

  // A sentence for an error the API answered (or a failure to reach it).
  function explain(error) {
    if (!(error instanceof ApiError)) return "Something went wrong in this page. Reload it and try again.";
    var said = error.message ? sentence(error.message) : "";
    var wait = seconds(error);
    switch (error.status) {
      case 0:
        return "The service could not be reached. Check your connection and try again.";
      case 401:
        return "Your token is no longer accepted. Sign in again.";
      case 403:
        return said || "Your token may not do this.";
      case 404:
        return error.field === "round_id" ? "This round no longer exists. Pick another round." : said || "Not found.";
      case 409:
        return "This round is closed: it takes no more examples, and its model answers no more questions. Pick an open round.";
      case 413:
        return "Too long: " + (said || "shorten the example and try again.");
      case 422:
        return said || "Something in the example is not right.";
      case 429:
        return (
          (error.code === "scoring_limited"
            ? "You have asked the model a lot in the last minute."
            : "Too many requests in the last minute.") +
          " Try again in " + (wait || "a few") + " second" + (wait === 1 ? "" : "s") + "."
        );
      case 503:
        return "The model or the service is busy or unavailable right now. Try again" +
          (wait ? " in " + wait + " second" + (wait === 1 ? "" : "s") : " in a moment") + ".";
      default:
        return "The service could not do this (error " + error.status + "). Try again; if it goes on, tell your lead.";
    }
  }

  function sentence(text) {
    var trimmed = text.trim();
    if (!trimmed) return "";
    trimmed = trimmed.charAt(0).toUpperCase() + trimmed.slice(1);
    return /[.!?]$/.test(trimmed) ? trimmed : trimmed + ".";
  }

  // ------------------------------------------------------------------------------ sign in/out

  function signInError(text) {
    var box = $("sign-in-error");
    box.textContent = text || "";
    show(box, Boolean(text));
  }

  var REFUSED_ROLES = {
    collector:
      "This is a collector's token. A collector submits examples for other writers through its own " +
      "front end; this page is for writers writing their own. Sign in with your own writer token.",
    exporter: "This is an exporter's token: it reads datasets and writes no examples. Sign in with your writer token."
  };

  function signIn(token, quietly) {
    state.token = token;
    return api("GET", "/api/me").then(
      function (me) {
        if (me.role !== "writer" && me.role !== "lead") {
          forget();
          signInError(REFUSED_ROLES[me.role] || "This token is not a writer's. Sign in with your writer token.");
          return;
        }
        state.me = me;
        try {
          window.sessionStorage.setItem(TOKEN_KEY, token);
        } catch (ignored) {
          // Storage refused (a private window's limits): the page still works until it is reloaded.
        }
        signInError("");
        $("token").value = "";
        $("who").textContent = "Signed in as " + me.name + (me.role === "lead" ? " (lead)" : "");
        show($("who"), true);
        show($("sign-out"), true);
        show($("sign-in"), false);
        show($("workspace"), true);
        loadRounds();
      },
      function (error) {
        forget();
        if (error.status === 401) {
          signInError(
            quietly
              ? "Your token is no longer accepted. Sign in again."
              : "That token is not known. Check that you copied all of it, and try again."
          );
        } else {
          signInError(explain(error));
        }
      }
    );
  }

  function forget() {
    state.token = null;
    state.me = null;
    try {
      window.sessionStorage.removeItem(TOKEN_KEY);
    } catch (ignored) {
      // nothing stored
    }
  }

  // Back to the sign-in form, with nothing of the writer's left on the page.
  function signOut(message) {
    forget();
    state.rounds = [];
    state.round = null;
    state.answer = null;
    state.minePage = 0;
    state.mineShown = 0;
    clear($("round-select"));
    clear($("inputs"));
    clear($("label-choices"));
    clear($("bars"));
    clear($("mine-list"));
    $("rationale").value = "";
    $("round-facts").textContent = "";
    $("who").textContent = "";
    ["stat-submitted", "stat-fooled", "stat-mer", "stat-accepted", "stat-vmer"].forEach(function (id) {
      $(id).textContent = "—";
    });
    ["notice", "example-form", "answer", "mine", "no-round", "round-picker", "form-error", "mine-error", "who", "sign-out", "workspace"].forEach(
      function (id) {
        show($(id), false);
      }
    );
    show($("sign-in"), true);
    signInError(message || "");
    $("token").value = "";
    $("token").focus();
  }

  // An error answered to a signed-in call: a withdrawn token signs out, the rest is shown in ``box``.
  function failed(error, box) {
    if (error instanceof ApiError && error.status === 401) {
      signOut(explain(error));
      return;
    }
    box.textContent = explain(error);
    show(box, true);
  }

  // ---------------------------------------------------------------------------------- rounds

  function loadRounds(keepId) {
    var notice = $("notice");
    show(notice, false);
    return api("GET", "/api/rounds").then(
      function (data) {
        state.rounds = (data.rounds || []).filter(function (r) {
          return r.state === "open";
        });
        var select = $("round-select");
        clear(select);
        state.rounds.forEach(function (r) {
          var option = make("option", "", "#" + r.id + " · " + r.name + " (" + r.task + ")");
          option.value = String(r.id);
          select.appendChild(option);
        });
        var open = state.rounds.length > 0;
        show($("no-round"), !open);
        show($("round-picker"), open);
        if (!open) {
          selectRound(null);
          return;
        }
        var wanted = keepId !== undefined && keepId !== null ? String(keepId) : select.value;
        if (state.rounds.some(function (r) { return String(r.id) === wanted; })) select.value = wanted;
        selectRound(roundById(select.value));
      },
      function (error) {
        failed(error, notice);
      }
    );
  }

  function roundById(id) {
    for (var i = 0; i < state.rounds.length; i++) {
      if (String(state.rounds[i].id) === String(id)) return state.rounds[i];
    }
    return null;
  }

  function inputsOf(round) {
    return Array.isArray(round.inputs) && round.inputs.length ? round.inputs : ["text"];
  }

  function selectRound(round) {
    stopLiveAsks();
    state.round = round;
    state.answer = null;
    show($("answer"), false);
    show($("form-error"), false);
    clear($("inputs"));
    clear($("label-choices"));
    $("rationale").value = "";
    clearFieldErrors();
    if (!round) {
      $("round-facts").textContent = "";
      show($("example-form"), false);
      show($("mine"), false);
      return;
    }
    state.roundFacts =
      "Task: " + round.task + " · Labels: " + round.labels.join(", ") +
      " · Model: " + (round.model && round.model.name ? round.model.name : "the round's model");
    $("round-facts").textContent = state.roundFacts;
    loadModelReading(round);
    var inputs = $("inputs");
    state.pads = {};
    inputsOf(round).forEach(function (name) {
      if (isImageRound(round)) {
        inputs.appendChild(padField(name));
        return;
      }
      var field = make("div", "input-field");
      field.setAttribute("data-testid", "field-" + name);
      var label = make("label", "", title(name));
      label.htmlFor = "input-" + name;
      var area = make("textarea");
      area.id = "input-" + name;
      area.name = name;
      area.rows = 3;
      area.setAttribute("data-testid", "input-" + name);
      area.setAttribute("aria-describedby", "error-" + name);
      var error = make("p", "field-error");
      error.id = "error-" + name;
      error.setAttribute("data-testid", "error-" + name);
      error.hidden = true;
      field.appendChild(label);
      field.appendChild(area);
      field.appendChild(error);
      inputs.appendChild(field);
    });
    var choices = $("label-choices");
    round.labels.forEach(function (value) {
      var label = make("label");
      var radio = make("input");
      radio.type = "radio";
      radio.name = "writer_label";
      radio.value = value;
      radio.setAttribute("data-testid", "label-" + value);
      label.appendChild(radio);
      label.appendChild(document.createTextNode(value));
      choices.appendChild(label);
    });
    show($("example-form"), true);
    show($("mine"), true);
    loadMine(false);
  }

  function isImageRound(round) {
    return !!round && round.input_kind === "image";
  }

  // An image input: a drawing pad (mouse, pen, touch; brush, undo, clear; or a file), what the model
  // reads beside it, and the field's error line.
  function padField(name) {
    var field = make("div", "input-field image-field");
    field.setAttribute("data-testid", "field-" + name);
    var label = make("p", "field-label", "Draw your " + title(name).toLowerCase());
    var pad = new window.DynavalDrawingPad({
      name: name,
      onChange: function () {
        edited();
        liveAsk();
      }
    });
    pad.element().setAttribute("aria-describedby", "error-" + name);
    var error = make("p", "field-error");
    error.id = "error-" + name;
    error.setAttribute("data-testid", "error-" + name);
    error.hidden = true;
    field.appendChild(label);
    field.appendChild(pad.element());
    field.appendChild(error);
    state.pads[name] = pad;
    return field;
  }

  function liveAsk() {
    if (!isImageRound(state.round)) return;
    var live = state.live;
    live.wanted = true;
    if (live.timer || live.inFlight) return;
    live.timer = window.setTimeout(runLiveAsk, Math.max(0, live.last + LIVE_GAP_MS - Date.now()));
  }

  // Forget the live questions not yet answered: their answers, when they come, are dropped.
  function stopLiveAsks() {
    var live = state.live;
    live.epoch += 1;
    live.wanted = false;
    if (live.timer) window.clearTimeout(live.timer);
    live.timer = null;
  }

  function runLiveAsk() {
    var live = state.live;
    live.timer = null;
    if (!live.wanted || !state.round || state.busy) return;
    live.wanted = false;
    var round = state.round;
    var epoch = live.epoch;
    var inputs = currentInputs();
    if (Object.keys(inputs).length === 0) {
      // A cleared pad: nothing to answer. A submission's verdict stays until the next drawing.
      if (state.answer && state.answer.source === "ask") {
        state.answer = null;
        renderAnswer();
      }
      return;
    }
    live.inFlight = true;
    live.last = Date.now();
    api("POST", "/api/rounds/" + round.id + "/predict", { inputs: inputs })
      .then(
        function (answer) {
          // Dropped when the writer has since submitted or changed round, or drawn on: the next
          // answer is on its way.
          if (live.epoch !== epoch || state.round !== round || state.busy) return;
          if (!sameInputs(inputs, currentInputs())) return;
          state.answer = {
            prediction: answer.prediction,
            probabilities: answer.probabilities,
            inputs: inputs,
            source: "ask"
          };
          show($("form-error"), false);
          renderAnswer();
        },
        function (error) {
          if (live.epoch === epoch && state.round === round) formError(error);
        }
      )
      .then(function () {
        live.inFlight = false;
        if (live.wanted) liveAsk();
      });
  }

  // How many tokens the round's model reads, after the round's facts: a longer example is refused.
  // An image model: the size it reads, which the drawing pads take. Nothing more is said when it
  // cannot be asked (asking the model says why).
  function loadModelReading(round) {
    api("GET", "/api/rounds/" + round.id + "/model").then(
      function (data) {
        if (state.round !== round || !data) return;
        if (data.image) {
          Object.keys(state.pads).forEach(function (name) {
            state.pads[name].setShape(data.image.width, data.image.height, data.image.mode);
          });
          // Set, not added to: the round may have been picked twice, each asking once.
          $("round-facts").textContent =
            state.roundFacts + " · Reads " + data.image.width + "\u00d7" + data.image.height +
            (data.image.mode === "L" ? " grey" : " colour") + " images";
          return;
        }
        if (!data.max_tokens) return;
        var over = (data.counted_over || []).map(title);
        $("round-facts").textContent =
          state.roundFacts + " · Reads at most " + data.max_tokens + " tokens" +
          (over.length > 1 ? " (" + over.join(" and ") + " together)" : "");
      },
      function () {}
    );
  }

  // --------------------------------------------------------------------------- the example

  function currentInputs() {
    var values = {};
    inputsOf(state.round).forEach(function (name) {
      var pad = state.pads[name];
      if (pad) {
        var image = pad.dataUrl();
        if (image !== null) values[name] = image; // nothing drawn: the API says it is required
        return;
      }
      values[name] = $("input-" + name).value;
    });
    return values;
  }

  function chosenLabel() {
    var checked = document.querySelector('#label-choices input[name="writer_label"]:checked');
    return checked ? checked.value : null;
  }

  function sameInputs(a, b) {
    return JSON.stringify(a) === JSON.stringify(b);
  }

  function clearFieldErrors() {
    var errors = document.querySelectorAll("#example-form .field-error");
    for (var i = 0; i < errors.length; i++) {
      errors[i].textContent = "";
      errors[i].hidden = true;
    }
    var marked = document.querySelectorAll('#example-form [aria-invalid="true"]');
    for (var j = 0; j < marked.length; j++) marked[j].removeAttribute("aria-invalid");
  }

  // Show an error of the example's form: beside the field it names, when the form has one.
  function formError(error) {
    clearFieldErrors();
    if (error instanceof ApiError && error.status === 401) {
      signOut(explain(error));
      return;
    }
    var text = explain(error);
    var box = $("form-error");
    // The API names an input where the body has it: inputs.premise (or text, sentiment's short form).
    var field = error instanceof ApiError && error.field ? error.field.replace(/^inputs\./, "") : null;
    var target = field === "writer_label" ? $("labels") : field ? $("input-" + field) || $(field) : null;
    var fieldBox = field ? $("error-" + field) : null;
    if (field === "writer_label" && error.status === 422) {
      text = "Pick your label: " + (state.round ? state.round.labels.join(", ") : "one of the round's labels") + ".";
    }
    if (target && fieldBox) {
      target.setAttribute("aria-invalid", "true");
      fieldBox.textContent = text;
      show(fieldBox, true);
      box.textContent = title(field) + ": " + text;
    } else {
      box.textContent = text;
    }
    if (error instanceof ApiError && error.status === 409) {
      // The round closed meanwhile: it leaves the list, and the notice above it says why.
      loadRounds().then(function () {
        var notice = $("notice");
        notice.textContent = text;
        show(notice, true);
      });
      return;
    }
    show(box, true);
  }

  function setBusy(busy) {
    state.busy = busy;
    $("ask").disabled = busy;
    $("submit").disabled = busy;
  }

  function ask() {
    if (state.busy || !state.round) return;
    var round = state.round;
    var inputs = currentInputs();
    clearFieldErrors();
    show($("form-error"), false);
    setBusy(true);
    api("POST", "/api/rounds/" + round.id + "/predict", { inputs: inputs })
      .then(
        function (answer) {
          if (state.round !== round) return;
          state.answer = {
            prediction: answer.prediction,
            probabilities: answer.probabilities,
            inputs: inputs,
            source: "ask"
          };
          renderAnswer();
        },
        function (error) {
          if (state.round === round) formError(error);
        }
      )
      .then(function () {
        setBusy(false);
      });
  }

  function submit(event) {
    event.preventDefault();
    if (state.busy || !state.round) return;
    var round = state.round;
    var inputs = currentInputs();
    var body = { inputs: inputs };
    var label = chosenLabel();
    if (label === null) {
      formError(new ApiError(422, "invalid_input", "", "writer_label", null));
      return;
    }
    body.writer_label = label;
    var rationale = $("rationale").value;
    if (rationale.trim()) body.rationale = rationale;
    clearFieldErrors();
    show($("form-error"), false);
    stopLiveAsks();
    setBusy(true);
    api("POST", "/api/rounds/" + round.id + "/candidates", body)
      .then(
        function (candidate) {
          if (state.round !== round) return;
          state.answer = {
            prediction: candidate.model_prediction,
            probabilities: candidate.model_probabilities,
            inputs: inputs,
            source: "submit",
            label: candidate.writer_label,
            fooled: candidate.fooled,
            status: candidate.status
          };
          inputsOf(round).forEach(function (name) {
            if (state.pads[name]) state.pads[name].reset();
            else $("input-" + name).value = "";
          });
          $("rationale").value = "";
          var checked = document.querySelector('#label-choices input[name="writer_label"]:checked');
          if (checked) checked.checked = false;
          renderAnswer();
          loadMine(false);
        },
        function (error) {
          if (state.round === round) formError(error);
        }
      )
      .then(function () {
        setBusy(false);
      });
  }

  // The model's answer as bars, and whether it agrees with the writer's label.
  function renderAnswer() {
    var answer = state.answer;
    var section = $("answer");
    if (!answer || !state.round) {
      show(section, false);
      return;
    }
    var submitted = answer.source === "submit";
    var label = submitted ? answer.label : chosenLabel();
    var verdict = $("verdict");
    $("answer-title").textContent = submitted ? "Submitted" : "The model's answer";
    var bars = $("bars");
    clear(bars);
    if (!answer.prediction || !answer.probabilities) {
      verdict.className = "verdict neutral";
      verdict.textContent =
        "Your example is stored. The model could not answer just now: it will score your example shortly " +
        "(see My examples).";
      show($("answer-stale"), false);
      show(section, true);
      return;
    }
    var p = answer.probabilities[answer.prediction];
    var says = "The model says " + answer.prediction + " (" + percent(p) + ")";
    if (label === null) {
      verdict.className = "verdict neutral";
      verdict.textContent = says + ". Pick your label to see whether this example fools it.";
    } else if (label !== answer.prediction) {
      verdict.className = "verdict fooled";
      verdict.textContent = submitted
        ? says + "; you said " + label + ": you fooled the model. Your example now goes to validation, " +
          "where annotators check your label."
        : says + "; you say " + label + ": the model is fooled. Submit the example to have it validated.";
    } else {
      verdict.className = "verdict agrees";
      verdict.textContent = submitted
        ? says + ", as you did: the model was not fooled. Your example is kept, but counts as not fooling it."
        : says + ", as you do: the model agrees with your label, so it is not fooled. Try rewording the example.";
    }
    verdict.setAttribute("data-fooled", label === null ? "" : String(label !== answer.prediction));
    var labels = state.round.labels.slice();
    Object.keys(answer.probabilities).forEach(function (name) {
      if (labels.indexOf(name) < 0) labels.push(name);
    });
    labels.forEach(function (name) {
      var probability = answer.probabilities[name] || 0;
      var item = make("li", name === answer.prediction ? "predicted" : "");
      item.setAttribute("data-testid", "bar-" + name);
      item.setAttribute("data-probability", String(probability));
      var caption = make("span", "bar-label", name);
      var notes = [];
      if (name === answer.prediction) notes.push("the model's answer");
      if (name === label) notes.push("your label");
      if (notes.length) caption.appendChild(make("small", "", notes.join(", ")));
      var track = make("span", "bar-track");
      track.setAttribute("aria-hidden", "true");
      var fill = make("span", "bar-fill");
      // A width set through the CSSOM, which the page's Content-Security-Policy allows (it refuses
      // style attributes in markup).
      fill.style.width = (Math.max(0, Math.min(1, probability)) * 100).toFixed(1) + "%";
      track.appendChild(fill);
      var value = make("span", "bar-value", percent(probability));
      item.appendChild(caption);
      item.appendChild(track);
      item.appendChild(value);
      bars.appendChild(item);
    });
    show($("answer-stale"), !submitted && !sameInputs(answer.inputs, currentInputs()));
    show(section, true);
  }

  function edited() {
    if (state.answer && state.answer.source === "ask") {
      show($("answer-stale"), !sameInputs(state.answer.inputs, currentInputs()));
    }
  }

  // ------------------------------------------------------------------------------ my examples

  function loadMine(more) {
    var round = state.round;
    if (!round) return;
    var page = more ? state.minePage + 1 : 1;
    var box = $("mine-error");
    show(box, false);
    api("GET", "/api/rounds/" + round.id + "/my-candidates?page=" + page + "&limit=" + PAGE_SIZE).then(
      function (data) {
        if (state.round !== round) return;
        var list = $("mine-list");
        if (!more) {
          clear(list);
          state.mineShown = 0;
        }
        state.minePage = page;
        var counts = data.counts || {};
        $("stat-submitted").textContent = String(data.total);
        $("stat-fooled").textContent = String(counts.fooled || 0);
        $("stat-mer").textContent = share(data.mer);
        $("stat-accepted").textContent = String(counts.accepted_fooled || 0);
        $("stat-vmer").textContent = share(data.vmer);
        data.candidates.forEach(function (candidate) {
          list.appendChild(mineItem(candidate));
        });
        state.mineShown += data.candidates.length;
        show($("mine-empty"), data.total === 0);
        show($("mine-more"), state.mineShown < data.total);
      },
      function (error) {
        if (state.round === round) failed(error, box);
      }
    );
  }

  // A signed image URL as a path on this page's origin: the page loads images from itself only.
  function samePageUrl(url) {
    try {
      var parsed = new URL(url, window.location.href);
      return parsed.pathname + parsed.search;
    } catch (ignored) {
      return url;
    }
  }

  function mineItem(candidate) {
    var item = make("li");
    item.setAttribute("data-testid", "mine-item");
    item.setAttribute("data-candidate", candidate.id);
    var top = make("div", "mine-top");
    var status = make("span", "badge " + candidate.status, STATUS_TEXT[candidate.status] || candidate.status);
    status.setAttribute("data-testid", "mine-status");
    status.setAttribute("data-status", candidate.status);
    top.appendChild(status);
    if (candidate.fooled !== null && candidate.fooled !== undefined) {
      var fooled = make(
        "span",
        "badge " + (candidate.fooled ? "fooled-yes" : "fooled-no"),
        candidate.fooled ? "fooled the model" : "not fooled"
      );
      fooled.setAttribute("data-testid", "mine-fooled");
      top.appendChild(fooled);
    }
    if (candidate.submitted_at) {
      var when = make("time", "muted small", candidate.submitted_at.replace("T", " ").slice(0, 16) + " UTC");
      when.dateTime = candidate.submitted_at;
      top.appendChild(when);
    }
    item.appendChild(top);
    var texts = make("dl", "mine-inputs");
    var images = candidate.image_urls || {};
    Object.keys(candidate.inputs).forEach(function (name) {
      texts.appendChild(make("dt", "", name));
      var value = make("dd");
      if (images[name]) {
        var thumbnail = make("img", "thumbnail");
        thumbnail.src = samePageUrl(images[name]);
        thumbnail.alt = "your " + name;
        thumbnail.width = 84;
        thumbnail.height = 84;
        thumbnail.setAttribute("data-testid", "mine-thumbnail");
        value.appendChild(thumbnail);
      } else {
        value.textContent = candidate.inputs[name];
      }
      texts.appendChild(value);
    });
    item.appendChild(texts);
    var facts = "Your label: " + candidate.writer_label + " · Model: ";
    if (candidate.model_prediction && candidate.model_probabilities) {
      facts += candidate.model_prediction + " (" + percent(candidate.model_probabilities[candidate.model_prediction]) + ")";
    } else {
      facts += "not answered yet";
    }
    var line = make("p", "mine-facts", facts);
    line.setAttribute("data-testid", "mine-facts");
    item.appendChild(line);
    if (typeof candidate.rationale === "string" && candidate.rationale) {
      item.appendChild(make("p", "muted small", "Why the model is wrong: " + candidate.rationale));
    }
    return item;
  }

  // ----------------------------------------------------------------------------------- start

  function start() {
    $("sign-in-form").addEventListener("submit", function (event) {
      event.preventDefault();
      var token = $("token").value.trim();
      if (!token) {
        signInError("Type or paste your writer token.");
        return;
      }
      $("sign-in-submit").disabled = true;
      signIn(token, false).then(function () {
        $("sign-in-submit").disabled = false;
      });
    });
    $("sign-out").addEventListener("click", function () {
      signOut("");
    });
    $("round-select").addEventListener("change", function () {
      selectRound(roundById($("round-select").value));
    });
    $("rounds-reload").addEventListener("click", function () {
      loadRounds(state.round ? state.round.id : null);
    });
    $("ask").addEventListener("click", ask);
    $("example-form").addEventListener("submit", submit);
    $("example-form").addEventListener("input", edited);
    $("label-choices").addEventListener("change", function () {
      clearFieldErrors();
      show($("form-error"), false);
      if (state.answer && state.answer.source === "ask") renderAnswer();
    });
    $("mine-reload").addEventListener("click", function () {
      loadMine(false);
    });
    $("mine-more").addEventListener("click", function () {
      loadMine(true);
    });
    var stored = null;
    try {
      stored = window.sessionStorage.getItem(TOKEN_KEY);
    } catch (ignored) {
      stored = null;
    }
    if (stored) signIn(stored, true);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
