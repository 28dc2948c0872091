// The review page: the document beside the form. Pages turn without leaving the page (the
// form keeps what the reviewer typed); a value's quote is shown on its page, as boxes over
// the page image or as a highlighted span of the page's text; a passage selected in the
// page's text becomes a value's quote (a hidden "quote:<pointer>" field, checked by the
// server); array items are added, and removed once the reviewer confirms it, as are the
// items left empty when the form is sent; the keyboard shortcuts listed on the page.
// Everything shown is set as text (textContent), never parsed as HTML.
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
  // An image document's page shown as its text (to select a passage in it).
  let textMode = false;
  const showText = doc.querySelector("[data-show-text]");

  function pageText(n) { return doc.querySelector(`[data-page-text="${n}"]`); }

  function showPage(n) {
    if (n < 1 || n > pages) return;
    current = n;
    doc.querySelector("[data-page-number]").textContent = String(n);
    if (showText) {
    showText.addEventListener("click", () => {
      textMode = !textMode;
      showText.setAttribute("aria-pressed", String(textMode));
      showText.textContent = textMode ? "Show the page's image" : "Show the page's text";
      showPage(current);
    });
  }
  for (const link of doc.querySelectorAll("[data-pager]")) {
      const target = n + Number(link.dataset.pager);
      link.hidden = target < 1 || target > pages;
      link.href = `?page=${target}`;
    }
    if (image && !image.dataset.failed) {
      if (image.getAttribute("src") !== imageBase + n) image.src = imageBase + n;
      image.alt = `Page ${n} of the document`;
      image.closest(".page-frame").hidden = textMode;
    }
    for (const text of doc.querySelectorAll("[data-page-text]")) {
      text.hidden = !(Number(text.dataset.pageText) === n && !imageShown());
    }
    clearHighlight();
  }

  function imageShown() { return Boolean(image && !image.dataset.failed && !textMode); }

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
    if (!record.page) {  // not found in the document, or corrected: nothing to show on a page
      clearHighlight();
      notice.textContent = record.support === "corrected"
        ? "A reviewer corrected this value: the model's quote is no longer its support."
        : "This value's quote was not found in the document.";
      return;
    }
    showPage(record.page);
    if (imageShown() && drawBoxes(record) === 0) {
      // Where no box is known for the quote, its text under the image shows it.
      pageText(current).hidden = false;
      notice.textContent = "No box is known for this quote on the page image; its text is highlighted below it.";
    }
    if (!imageShown() || boxes.childElementCount === 0) markText(record);
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
    if (remove) confirmRemoval([remove.closest("[data-item]")], remove, false, () => {});
    const undo = event.target.closest("[data-undo-quote]");
    if (undo) forgetQuote(undo.closest(".value-row"));
  });
  form.addEventListener("focusin", (event) => {
    const row = event.target.closest(".value-row");
    if (row) setCurrent(row);
    const of = event.target.dataset && event.target.dataset.evidenceOf;
    if (of) highlight(Number(of));
  });

  // --- A passage of the page's text as the current value's quote --------------------------
  const picker = doc.querySelector("[data-quote-picker]");
  let currentRow = null;
  let picked = null; // {start, end, text} of the selection, in the document's text

  function setCurrent(row) {
    currentRow = row;
    for (const other of form.querySelectorAll(".value-row.current")) other.classList.remove("current");
    row.classList.add("current");
    updatePicker();
  }

  function selectedPassage() {
    const selection = document.getSelection();
    if (!selection || selection.isCollapsed || selection.rangeCount === 0) return null;
    const range = selection.getRangeAt(0);
    const text = range.commonAncestorContainer.nodeType === Node.ELEMENT_NODE
      ? range.commonAncestorContainer.closest("[data-page-text]")
      : range.commonAncestorContainer.parentElement.closest("[data-page-text]");
    if (!text || text.hidden) return null;
    const before = document.createRange();
    before.setStart(text, 0);
    before.setEnd(range.startContainer, range.startOffset);
    const raw = range.toString();
    const lead = raw.length - raw.trimStart().length;
    const passage = raw.trim();
    if (!passage) return null;
    const start = Number(text.dataset.start) + before.toString().length + lead;
    return { start, end: start + passage.length, text: passage };
  }

  function updatePicker() {
    picked = selectedPassage();
    const quotable = currentRow && currentRow.hasAttribute("data-quotable");
    picker.hidden = !(picked && quotable);
    if (!picker.hidden) picker.querySelector("[data-quote-target]").textContent = currentRow.dataset.label;
  }
  document.addEventListener("selectionchange", updatePicker);
  picker.querySelector("[data-use-selection]").addEventListener("click", useSelection);

  function useSelection() {
    if (!picked || !currentRow || !currentRow.hasAttribute("data-quotable")) return;
    const pointer = currentRow.dataset.pointer;
    let field = form.querySelector(`input[type="hidden"][name="quote:${CSS.escape(pointer)}"]`);
    if (!field) {
      field = document.createElement("input");
      field.type = "hidden";
      field.name = `quote:${pointer}`;
      form.appendChild(field);
    }
    field.value = `${picked.start}-${picked.end}`;
    const shown = currentRow.querySelector("[data-new-quote]");
    const undo = document.createElement("button");
    undo.type = "button";
    undo.className = "small";
    undo.dataset.undoQuote = "";
    undo.textContent = "Keep the model's quote";
    shown.replaceChildren(`Your quote, saved when you approve: “${picked.text}” `, undo);
    shown.hidden = false;
    // "Show quote" now shows the passage chosen.
    const of = currentRow.querySelector("[data-evidence-of]").dataset.evidenceOf;
    if (of !== "") {
      Object.assign(evidence[Number(of)], { start: picked.start, end: picked.end, page: current, boxes: [] });
    }
    document.getSelection().removeAllRanges();
    picker.hidden = true;
    notice.textContent = `The selected text is now the quote of ${currentRow.dataset.label}.`;
  }

  function forgetQuote(row) {
    const field = form.querySelector(`input[type="hidden"][name="quote:${CSS.escape(row.dataset.pointer)}"]`);
    if (field) field.remove();
    const shown = row.querySelector("[data-new-quote]");
    shown.replaceChildren();
    shown.hidden = true;
  }

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

  // --- Removing list items, only once the reviewer says so ----------------------------------
  const dialog = document.getElementById("confirm-remove");

  function itemName(item) {
    const array = item.closest("[data-array]");
    const list = array.querySelector(":scope > legend").textContent.trim();
    const items = [...array.querySelector(":scope > [data-items]").children];
    return `${list}: item ${items.indexOf(item) + 1}`;
  }

  // Ask before ``items`` leave the form (``emptied``: they were left empty); ``then`` runs
  // once they are removed. Keeping them puts the focus back on ``back``.
  function confirmRemoval(items, back, emptied, then) {
    const what = items.map(itemName).join("; ");
    dialog.querySelector("#confirm-remove-what").textContent = emptied
      ? `These items are empty and will be left out: ${what}.`
      : `${what} and what it holds will not be approved.`;
    dialog.querySelector('[data-confirm="remove"]').textContent = emptied ? "Remove them" : "Remove";
    dialog.onclose = () => {
      if (dialog.returnValue !== "remove") {
        back.focus();
        return;
      }
      const array = items[0].closest("[data-array]");
      for (const item of items) item.remove();
      then();
      if (document.activeElement === document.body) array.querySelector(":scope > [data-add]").focus();
    };
    dialog.returnValue = "";
    dialog.showModal();
  }
  for (const button of dialog.querySelectorAll("[data-confirm]")) {
    button.addEventListener("click", () => dialog.close(button.dataset.confirm));
  }

  // Items whose every value is empty would be dropped without a word: ask first.
  function emptyItems() {
    return [...form.querySelectorAll("[data-items] > [data-item]")].filter((item) => {
      const inputs = [...item.querySelectorAll("input:not([type=hidden]), select, textarea")];
      return inputs.length > 0 && inputs.every((input) => input.value.trim() === "");
    });
  }
  form.addEventListener("submit", (event) => {
    const empty = emptyItems();
    if (empty.length === 0) return;
    event.preventDefault();
    const submitter = event.submitter;
    const back = empty[0].querySelector("input, select, textarea");
    confirmRemoval(empty, back, true, () => form.requestSubmit(submitter));
  });

  // --- Keyboard shortcuts (listed on the page) -------------------------------------------
  const shortcuts = document.getElementById("shortcuts");
  const approveNext = form.querySelector('button[name="next"]');

  function rows() {
    return [...form.querySelectorAll(".value-row")].filter((row) => row.offsetParent !== null);
  }

  // The next or previous value becomes the current one: its quote shows on the page, and
  // the focus goes to its "Show quote" button, or to the value's row when it has no quote
  // (not its input, so that letters stay shortcuts; Enter edits it).
  function moveFocus(step) {
    const all = rows();
    if (all.length === 0) return;
    const at = all.indexOf(currentRow);
    const to = at === -1 ? (step > 0 ? 0 : all.length - 1) : Math.min(all.length - 1, Math.max(0, at + step));
    const row = all[to];
    setCurrent(row);
    const target = row.querySelector("[data-evidence]") || row;
    target.focus();
    target.scrollIntoView({ block: "nearest" });
    const of = row.querySelector("[data-evidence-of]").dataset.evidenceOf;
    if (of !== "") highlight(Number(of));
  }

  document.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
      event.preventDefault();
      form.requestSubmit(approveNext);
      return;
    }
    const target = event.target;
    const typing = target.matches && target.matches("input, textarea, select, [contenteditable]");
    if (typing) {
      if (event.key === "Escape") target.blur();
      return;
    }
    if (event.ctrlKey || event.metaKey || event.altKey || dialog.open) return;
    if (event.key === "Enter" && target.matches(".value-row")) {
      event.preventDefault();
      target.querySelector("input, select, textarea").focus();
      return;
    }
    const actions = {
      j: () => moveFocus(1),
      k: () => moveFocus(-1),
      n: () => showPage(current + 1),
      p: () => showPage(current - 1),
      q: () => { updatePicker(); useSelection(); },
      "?": () => { shortcuts.open = !shortcuts.open; },
    };
    if (actions[event.key]) {
      event.preventDefault();
      actions[event.key]();
    }
  });

  showPage(current);
})();
