// The writers' page's drawing pad, for image task types: a canvas to draw on (mouse, pen and touch,
// through Pointer Events), a brush size, undo and clear, and a file to upload instead. Beside it,
// the image the model will read: the drawing scaled to the model's size (28x28 grey for the digits
// model) by the browser's area-averaging scaler and made grey as the model reads it. That small
// image is what is sent, so the writer sees exactly the model's input.
// No inline script or style: the page's Content-Security-Policy allows neither, nor data: images,
// so the uploaded file is shown through createImageBitmap, never an <img src="data:...">.
(function () {
  "use strict";

  var PAD_SIDE = 280;
  var BRUSHES = { fine: 14, medium: 22, bold: 30 };

  function make(tag, className, text) {
    var element = document.createElement(tag);
    if (className) element.className = className;
    if (text !== undefined) element.textContent = text;
    return element;
  }

  function button(text, testid) {
    var b = make("button", "secondary", text);
    b.type = "button";
    b.setAttribute("data-testid", testid);
    return b;
  }

  // options: name (the input's name), width, height, mode ("L" or "RGB"), onChange (called after
  // every stroke's point and every clear, undo or upload, with the pad).
  function DrawingPad(options) {
    this.name = options.name;
    this.width = options.width || 28;
    this.height = options.height || 28;
    this.grey = (options.mode || "L") === "L";
    this.onChange = options.onChange || function () {};
    this.strokes = [];
    this.current = null;
    this.upload = null; // {dataUrl, bitmap} of an uploaded file, sent as it is
    this.brush = BRUSHES.medium;
    this.build();
    this.redraw();
  }

  DrawingPad.prototype.build = function () {
    var self = this;
    var root = make("div", "drawing");
    root.id = "input-" + this.name;
    root.setAttribute("data-testid", "input-" + this.name);
    root.tabIndex = -1;

    var padBox = make("div", "pad-box");
    var pad = make("canvas", "pad");
    pad.width = PAD_SIDE;
    pad.height = PAD_SIDE;
    pad.setAttribute("data-testid", "pad");
    pad.setAttribute("role", "img");
    pad.setAttribute("aria-label", "Drawing area: draw your example here");
    padBox.appendChild(pad);

    var previewBox = make("div", "preview-box");
    var preview = make("canvas", "preview");
    preview.width = this.width;
    preview.height = this.height;
    preview.setAttribute("data-testid", "model-input");
    preview.setAttribute("role", "img");
    preview.setAttribute("aria-label", "What the model reads");
    previewBox.appendChild(preview);
    previewBox.appendChild(
      make(
        "p",
        "muted small",
        "What the model reads: " + this.width + "\u00d7" + this.height + (this.grey ? " grey" : " colour") +
          " pixels, exactly as they are sent."
      )
    );

    var tools = make("div", "pad-tools");
    var size = make("label", "brush");
    size.appendChild(document.createTextNode("Brush "));
    var select = make("select");
    select.setAttribute("data-testid", "brush");
    Object.keys(BRUSHES).forEach(function (key) {
      var option = make("option", "", key);
      option.value = String(BRUSHES[key]);
      if (BRUSHES[key] === self.brush) option.selected = true;
      select.appendChild(option);
    });
    select.addEventListener("change", function () {
      self.brush = Number(select.value);
    });
    size.appendChild(select);
    var undo = button("Undo", "undo");
    var clearButton = button("Clear", "clear");
    var fileLabel = make("label", "file");
    fileLabel.appendChild(document.createTextNode("or upload a PNG or JPEG "));
    var file = make("input");
    file.type = "file";
    file.accept = "image/png,image/jpeg";
    file.setAttribute("data-testid", "upload");
    fileLabel.appendChild(file);
    tools.appendChild(size);
    tools.appendChild(undo);
    tools.appendChild(clearButton);
    tools.appendChild(fileLabel);

    root.appendChild(padBox);
    root.appendChild(previewBox);
    root.appendChild(tools);

    this.root = root;
    this.pad = pad;
    this.preview = preview;
    this.file = file;

    pad.addEventListener("pointerdown", function (event) {
      self.start(event);
    });
    pad.addEventListener("pointermove", function (event) {
      self.move(event);
    });
    ["pointerup", "pointercancel", "lostpointercapture"].forEach(function (kind) {
      pad.addEventListener(kind, function () {
        self.end();
      });
    });
    undo.addEventListener("click", function () {
      self.undo();
    });
    clearButton.addEventListener("click", function () {
      self.reset();
      self.onChange(self);
    });
    file.addEventListener("change", function () {
      self.load(file.files && file.files[0]);
    });
  };

  DrawingPad.prototype.element = function () {
    return this.root;
  };

  DrawingPad.prototype.point = function (event) {
    var rect = this.pad.getBoundingClientRect();
    return [
      ((event.clientX - rect.left) * PAD_SIDE) / rect.width,
      ((event.clientY - rect.top) * PAD_SIDE) / rect.height
    ];
  };

  DrawingPad.prototype.start = function (event) {
    if (event.button !== undefined && event.button > 0) return;
    event.preventDefault();
    if (this.pad.setPointerCapture) this.pad.setPointerCapture(event.pointerId);
    this.upload = null; // drawing replaces an uploaded file
    this.file.value = "";
    this.current = { width: this.brush, points: [this.point(event)] };
    this.strokes.push(this.current);
    this.redraw();
    this.onChange(this);
  };

  DrawingPad.prototype.move = function (event) {
    if (!this.current) return;
    event.preventDefault();
    var events = event.getCoalescedEvents ? event.getCoalescedEvents() : [event];
    for (var i = 0; i < events.length; i++) this.current.points.push(this.point(events[i]));
    if (!events.length) this.current.points.push(this.point(event));
    this.redraw();
    this.onChange(this);
  };

  DrawingPad.prototype.end = function () {
    if (!this.current) return;
    this.current = null;
    this.onChange(this);
  };

  DrawingPad.prototype.undo = function () {
    if (this.upload) this.upload = null;
    else this.strokes.pop();
    this.file.value = "";
    this.redraw();
    this.onChange(this);
  };

  DrawingPad.prototype.reset = function () {
    this.strokes = [];
    this.current = null;
    this.upload = null;
    this.file.value = "";
    this.redraw();
  };

  DrawingPad.prototype.load = function (file) {
    var self = this;
    if (!file) return;
    var reader = new FileReader();
    reader.onload = function () {
      var dataUrl = String(reader.result);
      var shown = window.createImageBitmap ? window.createImageBitmap(file) : Promise.resolve(null);
      shown.then(
        function (bitmap) {
          self.upload = { dataUrl: dataUrl, bitmap: bitmap };
          self.strokes = [];
          self.redraw();
          self.onChange(self);
        },
        function () {
          // Not an image the browser can show: sent as it is, the service says what is wrong.
          self.upload = { dataUrl: dataUrl, bitmap: null };
          self.strokes = [];
          self.redraw();
          self.onChange(self);
        }
      );
    };
    reader.readAsDataURL(file);
  };

  DrawingPad.prototype.redraw = function () {
    var ctx = this.pad.getContext("2d");
    ctx.fillStyle = "#000";
    ctx.fillRect(0, 0, PAD_SIDE, PAD_SIDE);
    if (this.upload && this.upload.bitmap) {
      ctx.imageSmoothingEnabled = true;
      ctx.drawImage(this.upload.bitmap, 0, 0, PAD_SIDE, PAD_SIDE);
    }
    ctx.strokeStyle = "#fff";
    ctx.fillStyle = "#fff";
    ctx.lineCap = "round";
    ctx.lineJoin = "round";
    this.strokes.forEach(function (stroke) {
      var points = stroke.points;
      ctx.lineWidth = stroke.width;
      if (points.length === 1) {
        ctx.beginPath();
        ctx.arc(points[0][0], points[0][1], stroke.width / 2, 0, 2 * Math.PI);
        ctx.fill();
        return;
      }
      ctx.beginPath();
      ctx.moveTo(points[0][0], points[0][1]);
      for (var i = 1; i < points.length; i++) ctx.lineTo(points[i][0], points[i][1]);
      ctx.stroke();
    });
    this.renderPreview();
  };

  // The drawing scaled to the model's size and made grey: the model's input, and what is sent.
  DrawingPad.prototype.renderPreview = function () {
    var ctx = this.preview.getContext("2d");
    ctx.imageSmoothingEnabled = true;
    ctx.imageSmoothingQuality = "high";
    ctx.fillStyle = "#000";
    ctx.fillRect(0, 0, this.width, this.height);
    ctx.drawImage(this.pad, 0, 0, this.width, this.height);
    if (!this.grey) return;
    var image = ctx.getImageData(0, 0, this.width, this.height);
    var data = image.data;
    for (var i = 0; i < data.length; i += 4) {
      // ITU-R 601 luma, as Pillow's convert("L") computes grey.
      var grey = Math.round((data[i] * 299 + data[i + 1] * 587 + data[i + 2] * 114) / 1000);
      data[i] = data[i + 1] = data[i + 2] = grey;
      data[i + 3] = 255;
    }
    ctx.putImageData(image, 0, 0);
  };

  DrawingPad.prototype.isEmpty = function () {
    return !this.upload && this.strokes.length === 0;
  };

  // The image to send: the uploaded file as it is, or the drawing as the model reads it (a PNG).
  DrawingPad.prototype.dataUrl = function () {
    if (this.upload) return this.upload.dataUrl;
    if (this.strokes.length === 0) return null;
    return this.preview.toDataURL("image/png");
  };

  DrawingPad.prototype.setShape = function (width, height, mode) {
    this.width = width;
    this.height = height;
    this.grey = mode === "L";
    this.preview.width = width;
    this.preview.height = height;
    var note = this.preview.parentNode.querySelector("p");
    if (note) {
      note.textContent =
        "What the model reads: " + width + "\u00d7" + height + (this.grey ? " grey" : " colour") +
        " pixels, exactly as they are sent.";
    }
    this.redraw();
  };

  window.DynavalDrawingPad = DrawingPad;
})();
