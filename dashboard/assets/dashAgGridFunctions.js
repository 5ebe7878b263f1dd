/* Functions the dashboard's grids name in their column definitions (dashboard/grids.py).
 * dash-ag-grid looks them up in these two objects; Dash serves every .js file of assets/. */
(function () {
  "use strict";
  var funcs = (window.dashAgGridFunctions = window.dashAgGridFunctions || {});
  var components = (window.dashAgGridComponentFunctions = window.dashAgGridComponentFunctions || {});

  // what a spreadsheet skips before it looks for a formula (analytics/render.py, _LEADING_CHARS)
  var LEADING = /^[\s\u0000-\u001f\u007f-\u009f\u061c\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]*/;
  var FORMULA = /^[=+\-@]/;

  /* A CSV cell as render.csv_safe writes it: text a spreadsheet would run as a formula gets a
   * leading apostrophe; numbers, empty cells and other text stay as they are. */
  funcs.jobsightCsvCell = function (params) {
    var v = params.value;
    if (typeof v !== "string") {
      return v;
    }
    if (v.charAt(0) === "\t" || v.charAt(0) === "\r" || FORMULA.test(v.replace(LEADING, ""))) {
      return "'" + v;
    }
    return v;
  };

  var formats = {};
  /* A number with thousands separators, ``digits`` decimals and a unit ("12,345.6 SBU"). */
  funcs.jobsightNumber = function (value, digits, unit) {
    if (value === null || value === undefined || value === "" || isNaN(value)) {
      return "";
    }
    var f = formats[digits];
    if (!f) {
      f = formats[digits] = new Intl.NumberFormat("en-US", {minimumFractionDigits: digits,
                                                              maximumFractionDigits: digits});
    }
    return f.format(Number(value)) + (unit || "");
  };

  /* A cell that links to a page of the dashboard: the row's ``hrefField`` (a path the server made),
   * the cell's value as text; anything but a path of this site ("//host", "javascript:") gives the
   * text alone. A plain click navigates inside the app as dcc.Link does; a click with a modifier
   * (new tab, new window) is the browser's. */
  components.JobsightLink = function (props) {
    var href = props.data ? props.data[props.hrefField] : null;
    var text = props.value === null || props.value === undefined ? "" : String(props.value);
    if (typeof href !== "string" || href.charAt(0) !== "/" || href.charAt(1) === "/") {
      return text;
    }
    return window.React.createElement("a", {
      href: href,
      className: "grid-link",
      onClick: function (e) {
        if (e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) {
          return;
        }
        e.preventDefault();
        window.history.pushState({}, "", href);
        window.dispatchEvent(new CustomEvent("_dashprivate_pushstate"));
        window.scrollTo(0, 0);
      },
    }, text);
  };
})();
