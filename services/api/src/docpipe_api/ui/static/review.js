// The review page: the document beside the form. Pages turn without leaving the page (the
// form keeps what the reviewer typed); a value's quote is shown on its page, as boxes over
// the page image or as a highlighted span of the page's text; array items are added and
// removed. Everything shown is set as text (textContent), never parsed as HTML.
"use strict";
(function () {
  const doc = document.getElementById("document");
  if (!doc) return;
  const evidence = JSON.parse(document.getElementById("evidence-data").textContent);
  const pages = Number(doc.dataset.pages);
  const imageBase = doc.dataset.imageBase;
  const image = document.getElementById("page-image");
  const boxes = doc.querySelector("[data-boxes]");
  const notice = document.getElementById("quote-notice");
  let current = Number(doc.dataset.page);

  function pageText(n) { return doc.querySelector(`[data-page-text="${n}"]`); }

  function showPage(n) {
    if (n < 1 || n > pages) return;
    current = n;
    doc.querySelector("[data-page-number]").textContent = String(n);
    for (const link of doc.querySelectorAll("[data-pager]")) {
      const target = n + Number(link.dataset.pager);
      link.hidden = target < 1 || target > pages;
      link.href = `?page=${target}`;
    }
    if (image && !image.dataset.failed) {
      if (image.getAttribute("src") !== imageBase + n) image.src = imageBase + n;
      image.alt = `Page ${n} of the document`;
    }
    for (const text of doc.querySelectorAll("[data-page-text]")) {
      text.hidden = !(Number(text.dataset.pageText) === n && (!image || image.dataset.failed));
    }
    clearHighlight();
  }

  function clearHighlight() {
    if (boxes) boxes.replaceChildren();
    for (const text of doc.querySelectorAll("[data-page-text]")) {
      if (text.querySelector("mark")) text.textContent = text.textContent;
    }
  }

  function drawBoxes(record) {
    const found = (record.boxes || []).filter((b) => Number(b.page) === current);
    for (const box of found) {
      // PDF points on the upright page, origin top left, with the page's size beside.
      const width = Number(box.page_width || record.page_width);
      const height = Number(box.page_height || record.page_height);
      const left = Number(box.left ?? box.x0), top = Number(box.top ?? box.y0);
      const right = Number(box.right ?? box.x1), bottom = Number(box.bottom ?? box.y1);
      if (!width || !height || !(right > left) || !(bottom > top)) continue;
      const div = document.createElement("div");
      div.className = "quote-box";
      div.dataset.quoteBox = String(record.index);
      div.style.left = `${(100 * left) / width}%`;
      div.style.top = `${(100 * top) / height}%`;
      div.style.width = `${(100 * (right - left)) / width}%`;
      div.style.height = `${(100 * (bottom - top)) / height}%`;
      boxes.appendChild(div);
    }
    if (boxes.firstChild) boxes.firstChild.scrollIntoView({ block: "center", behavior: "smooth" });
    return boxes.childElementCount;
  }

  function markText(record) {
    const text = pageText(current);
    const start = Number(text.dataset.start);
    const whole = text.textContent;
    const from = Math.max(0, record.start - start);
    const to = Math.min(whole.length, record.end - start);
    if (to <= from) return;
    const mark = document.createElement("mark");
    mark.dataset.quote = String(record.index);
    mark.textContent = whole.slice(from, to);
    text.replaceChildren(whole.slice(0, from), mark, whole.slice(to));
    mark.scrollIntoView({ block: "center", behavior: "smooth" });
  }

  function highlight(index) {
    const record = evidence[index];
    if (!record) return;
    for (const button of document.querySelectorAll("[data-evidence]")) {
      button.setAttribute("aria-pressed", String(Number(button.dataset.evidence) === index));
    }
    notice.textContent = "";
    if (!record.page) {  // not found in the document: nothing to show on a page
      clearHighlight();
      notice.textContent = "This value's quote was not found in the document.";
      return;
    }
    showPage(record.page);
    if (image && !image.dataset.failed && drawBoxes(record) === 0) {
      // Where no box is known for the quote, its text under the image shows it.
      pageText(current).hidden = false;
      notice.textContent = "No box is known for this quote on the page image; its text is highlighted below it.";
    }
    if (!image || image.dataset.failed || boxes.childElementCount === 0) markText(record);
  }

  function imageFailed() {
    // No page image (not rendered, or not available): the page's text instead.
    image.dataset.failed = "true";
    image.hidden = true;
    showPage(current);
  }
  if (image) {
    image.addEventListener("error", imageFailed);
    // It may have failed before this script ran.
    if (image.complete && image.naturalWidth === 0) imageFailed();
  }
  for (const link of doc.querySelectorAll("[data-pager]")) {
    link.addEventListener("click", (event) => {
      event.preventDefault();
      showPage(current + Number(link.dataset.pager));
    });
  }

  const form = document.getElementById("approve-form");
  form.addEventListener("click", (event) => {
    const button = event.target.closest("[data-evidence]");
    if (button) highlight(Number(button.dataset.evidence));
    const add = event.target.closest("[data-add]");
    if (add) addItem(add.closest("[data-array]"));
    const remove = event.target.closest("[data-remove]");
    if (remove) removeItem(remove.closest("[data-item]"));
  });
  form.addEventListener("focusin", (event) => {
    const of = event.target.dataset && event.target.dataset.evidenceOf;
    if (of) highlight(Number(of));
  });

  let fresh = 0;
  // Names and pointers below ``from`` in ``root`` (and in the item templates it holds) move
  // to ``to``: a new item's own index, however deep its arrays.
  function rename(root, from, to) {
    for (const element of root.querySelectorAll("[name], [data-pointer]")) {
      if (element.name) element.name = element.name.split(from).join(to);
      if (element.dataset.pointer) element.dataset.pointer = element.dataset.pointer.split(from).join(to);
    }
    for (const inner of root.querySelectorAll("template")) rename(inner.content, from, to);
  }

  function addItem(array) {
    const items = array.querySelector(":scope > [data-items]");
    const template = array.querySelector(":scope > template[data-item-template]");
    const index = items.children.length + fresh++ + 1000;
    const item = template.content.firstElementChild.cloneNode(true);
    rename(item, `${array.dataset.pointer}/__index__`, `${array.dataset.pointer}/${index}`);
    const ids = new Map();
    for (const element of item.querySelectorAll("[id]")) {
      ids.set(element.id, `new-item-${index}-${ids.size}`);
      element.id = ids.get(element.id);
    }
    for (const label of item.querySelectorAll("label[for]")) {
      if (ids.has(label.htmlFor)) label.htmlFor = ids.get(label.htmlFor);
    }
    items.appendChild(item);
    const first = item.querySelector("input, select, textarea");
    if (first) first.focus();
  }

  function removeItem(item) {
    const array = item.closest("[data-array]");
    item.remove();
    array.querySelector(":scope > [data-add]").focus();
  }

  showPage(current);
})();
