/* window.jobsight.TextTable: a whole table as one Dash component (dashboard/text_table.py says its
 * props). Every value goes in as a React child, a text node: data, never markup. A link is drawn
 * only for a path on this site and opens it as dcc.Link does, without a reload. */
(function () {
  "use strict";
  var ns = (window.jobsight = window.jobsight || {});

  function follow(e, href) {
    if (e.button !== 0 || e.metaKey || e.shiftKey || e.altKey || e.ctrlKey) {
      return;      // a new tab or window: the browser's own way
    }
    e.preventDefault();
    window.history.pushState({}, "", href);
    window.dispatchEvent(new CustomEvent("_dashprivate_pushstate"));
    window.scrollTo(0, 0);
  }

  function sitePath(href) {
    return typeof href === "string" && href.charAt(0) === "/" && href.charAt(1) !== "/" && href.indexOf("\\") < 0;
  }

  function item(h, it, i) {
    var cls = "col-" + it.field + (i === 0 ? "" : " sub");
    var text = it.text === null || it.text === undefined ? "" : String(it.text);
    if (sitePath(it.href)) {
      return h("a", {key: i, className: cls, href: it.href, title: it.title || undefined,
                     onClick: function (e) { follow(e, it.href); }}, text);
    }
    return h("div", {key: i, className: cls, title: it.title || undefined}, text);
  }

  ns.TextTable = function TextTable(props) {
    var h = window.React.createElement;
    var columns = props.columns || [];
    var rowClasses = props.rowClassNames || [];
    var head = h("thead", null, h("tr", null, columns.map(function (c, j) {
      return h("th", {key: j, scope: "col", className: c.className || undefined}, String(c.name));
    })));
    var body = h("tbody", null, (props.rows || []).map(function (row, i) {
      return h("tr", {key: i, className: rowClasses[i] || undefined}, row.map(function (cell, j) {
        var c = columns[j] || {};
        return h("td", {key: j, className: c.className || undefined}, (cell || []).map(function (it, k) {
          return item(h, it, k);
        }));
      }));
    }));
    return h("table", {id: props.id, className: props.className}, head, body);
  };
})();
