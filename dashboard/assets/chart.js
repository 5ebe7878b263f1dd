/* window.jobsight.Chart: a bar chart as one Dash component, drawn as SVG without plotly.js
 * (dashboard/chart.py says its props and which figures it draws). It reads the same figure dict a
 * dcc.Graph would: bar traces (stacked, grouped or horizontal), line traces over the same
 * categories, the title, the axis titles and the annotations. Every string goes into the page as a
 * text node (React's children or an SVG <title>), never as markup; the figure's strings carry
 * markup characters as numeric character references (figures.inert, for Plotly), decoded here
 * once, into text. Each bar and point has its values as a tooltip. */
(function () {
  "use strict";
  var ns = (window.jobsight = window.jobsight || {});
  // plotly.js's default colour sequence, for traces that name no colour
  var COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                 "#bcbd22", "#17becf"];
  var MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
  var PLOT_HEIGHT = 330;
  var FONT = 12;

  function text(s) {
    if (s === null || s === undefined) { return ""; }
    return String(s).replace(/&#(\d+);/g, function (_m, n) { return String.fromCharCode(Number(n)); });
  }

  function titleOf(o) {
    return text(o && o.title && typeof o.title === "object" ? o.title.text : o && o.title);
  }

  function num(v) {
    var x = typeof v === "number" ? v : parseFloat(v);
    return isFinite(x) ? x : null;
  }

  function fmt(v) {
    return v === null ? "-" : v.toLocaleString("en-US", {maximumFractionDigits: 1});
  }

  function tick(v, step) {
    var a = Math.abs(v);
    if (a >= 1e6 && step >= 1e5) { return +(v / 1e6).toFixed(step >= 1e6 ? 0 : 1) + "M"; }
    if (a >= 1e4 && step >= 1e3) { return +(v / 1e3).toFixed(step >= 1e3 ? 0 : 1) + "k"; }
    return String(+v.toFixed(step >= 1 ? 0 : 2));
  }

  function niceStep(top, n) {
    var raw = top / n;
    var p = Math.pow(10, Math.floor(Math.log10(raw)));
    var f = raw / p;
    return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 2.5 ? 2.5 : f <= 5 ? 5 : 10) * p;
  }

  // "2026-11-03 00:00:00" -> a date; else null
  function dateOf(s) {
    var m = /^(\d{4})-(\d{2})-(\d{2})/.exec(String(s));
    return m ? {y: +m[1], m: +m[2], d: +m[3]} : null;
  }

  // the category labels: dates as "Nov 3" (a year under the first and at each new year), or
  // "Nov 2026" when every category is a month's first day; other categories as they are
  function labels(cats) {
    var dates = cats.map(dateOf);
    if (!cats.length || dates.some(function (d) { return d === null; })) {
      return cats.map(function (c) { return [text(c)]; });
    }
    var months = cats.length > 1 && dates.every(function (d) { return d.d === 1; });
    return dates.map(function (d, i) {
      if (months) { return [MONTHS[d.m - 1] + " " + d.y]; }
      var first = MONTHS[d.m - 1] + " " + d.d;
      return i === 0 || dates[i - 1].y !== d.y ? [first, String(d.y)] : [first];
    });
  }

  function at(v, i) { return Array.isArray(v) ? v[i] : v; }

  // the figure as categories, series and scale: what draw() needs
  function model(fig) {
    var layout = fig.layout || {};
    var traces = (fig.data || []).filter(function (t) { return t && (t.type === "bar" || t.type === "scatter"); });
    var horizontal = traces.some(function (t) { return t.type === "bar" && t.orientation === "h"; });
    var catKey = horizontal ? "y" : "x", valKey = horizontal ? "x" : "y";
    var cats = [], index = {};
    traces.forEach(function (t) {
      (t[catKey] || []).forEach(function (c) {
        if (!(c in index)) { index[c] = cats.length; cats.push(c); }
      });
    });
    if (cats.length && cats.every(function (c) { return dateOf(c) !== null; })) {
      cats.sort();
      cats.forEach(function (c, i) { index[c] = i; });
    }
    var stack = layout.barmode === "stack";
    var bars = traces.filter(function (t) { return t.type === "bar"; });
    var top = 0;
    var base = cats.map(function () { return 0; });
    var series = traces.map(function (t, k) {
      var colour = (t.marker && t.marker.color) || (t.line && t.line.color) || COLOURS[k % COLOURS.length];
      var points = (t[catKey] || []).map(function (c, i) {
        var v = num((t[valKey] || [])[i]);
        var p = {cat: index[c], value: v, from: 0, to: v === null ? 0 : v,
                 opacity: t.marker ? at(t.marker.opacity, i) : undefined, note: text(at(t.hovertext, i))};
        if (t.type === "bar" && stack && v !== null) {
          p.from = base[p.cat];
          p.to = p.from + v;
          base[p.cat] = p.to;
        }
        top = Math.max(top, p.to);
        return p;
      });
      return {trace: t, name: text(t.name), colour: colour, points: points,
              slot: bars.indexOf(t), line: t.line || {}, mode: t.mode || "lines"};
    });
    var step = niceStep(top > 0 ? top : 1, 5);
    var max = Math.max(step, Math.ceil((top > 0 ? top : 1) / step - 1e-9) * step);
    return {layout: layout, cats: cats, series: series, horizontal: horizontal, group: !stack && bars.length > 1,
            nbars: bars.length, step: step, max: max};
  }

  function draw(h, m, width) {
    var catLabels = labels(m.cats);
    var catTips = m.cats.map(function (c) { return dateOf(c) ? String(c).slice(0, 10) : text(c); });
    var valTitle = titleOf(m.horizontal ? m.layout.xaxis : m.layout.yaxis);
    var catTitle = titleOf(m.horizontal ? m.layout.yaxis : m.layout.xaxis);
    var ticks = [];
    for (var v = 0; v <= m.max + m.step / 2; v += m.step) { ticks.push(v); }
    var longest = 0;
    catLabels.forEach(function (l) { longest = Math.max(longest, l[0].length); });
    var tickChars = Math.max.apply(null, ticks.map(function (t) { return tick(t, m.step).length; }));
    var left = m.horizontal ? Math.min(width * 0.4, longest * 6.6 + 14) : tickChars * 7 + 14 + (valTitle ? 18 : 0);
    var lines = Math.max.apply(null, [1].concat(catLabels.map(function (l) { return l.length; })));
    var bottom = (m.horizontal ? 20 : 6 + 15 * lines) + ((m.horizontal ? valTitle : catTitle) ? 20 : 0);
    var right = 14, topPad = 8;
    var pw = Math.max(10, width - left - right), ph = PLOT_HEIGHT - topPad - bottom;
    var n = Math.max(1, m.cats.length);
    var band = (m.horizontal ? ph : pw) / n;
    var scale = function (x) { return x / m.max * (m.horizontal ? pw : ph); };
    var kids = [];
    // the value axis: grid lines and their labels
    ticks.forEach(function (t, i) {
      var p = scale(t);
      if (m.horizontal) {
        kids.push(h("line", {key: "g" + i, x1: left + p, x2: left + p, y1: topPad, y2: topPad + ph,
                             className: t === 0 ? "chart-zero" : "chart-grid"}));
        kids.push(h("text", {key: "t" + i, x: left + p, y: topPad + ph + 15, textAnchor: "middle",
                             className: "chart-tick"}, tick(t, m.step)));
      } else {
        kids.push(h("line", {key: "g" + i, x1: left, x2: left + pw, y1: topPad + ph - p, y2: topPad + ph - p,
                             className: t === 0 ? "chart-zero" : "chart-grid"}));
        kids.push(h("text", {key: "t" + i, x: left - 6, y: topPad + ph - p + 4, textAnchor: "end",
                             className: "chart-tick"}, tick(t, m.step)));
      }
    });
    // the categories' labels, as many as fit
    var every = m.horizontal ? Math.ceil(n / Math.max(1, Math.floor(ph / 14)))
                             : Math.ceil(n / Math.max(1, Math.floor(pw / (longest * 7 + 12))));
    catLabels.forEach(function (l, i) {
      if (i % every) { return; }
      if (m.horizontal) {
        var y = topPad + ph - (i + 0.5) * band;      // the first category at the bottom, as Plotly draws it
        kids.push(h("text", {key: "c" + i, x: left - 6, y: y + 4, textAnchor: "end", className: "chart-tick"}, l[0]));
      } else {
        var x = left + (i + 0.5) * band;
        kids.push(h("text", {key: "c" + i, x: x, y: topPad + ph + 15, textAnchor: "middle", className: "chart-tick"},
                    l.map(function (part, j) {
                      return h("tspan", {key: j, x: x, dy: j ? 14 : 0}, part);
                    })));
      }
    });
    if (valTitle) {
      kids.push(m.horizontal
        ? h("text", {key: "vt", x: left + pw / 2, y: PLOT_HEIGHT - 4, textAnchor: "middle", className: "chart-axis-title"}, valTitle)
        : h("text", {key: "vt", transform: "translate(13," + (topPad + ph / 2) + ") rotate(-90)", textAnchor: "middle",
                     className: "chart-axis-title"}, valTitle));
    }
    if (catTitle && !m.horizontal) {
      kids.push(h("text", {key: "ct", x: left + pw / 2, y: PLOT_HEIGHT - 4, textAnchor: "middle",
                           className: "chart-axis-title"}, catTitle));
    }
    // bars, then lines and their points on top
    var gap = band * 0.15, inner = band - 2 * gap;
    m.series.forEach(function (s, k) {
      if (s.trace.type !== "bar") { return; }
      s.points.forEach(function (p, i) {
        if (p.value === null || p.value === 0) { return; }
        var w = m.group ? inner / m.nbars : inner;
        var off = gap + (m.group ? s.slot * w : 0);
        var a = scale(Math.min(p.from, p.to)), b = scale(Math.max(p.from, p.to));
        var tip = catTips[p.cat] + ", " + s.name + ": " + fmt(p.value) + (p.note ? "\n" + p.note : "");
        var attrs = m.horizontal
          ? {x: left + a, y: topPad + ph - (p.cat + 1) * band + off, width: Math.max(b - a, 0.5), height: w}
          : {x: left + p.cat * band + off, y: topPad + ph - b, width: w, height: Math.max(b - a, 0.5)};
        attrs.key = k + "-" + i;
        attrs.fill = s.colour;
        attrs.className = "chart-bar";
        if (p.opacity !== undefined && p.opacity !== null) { attrs.fillOpacity = p.opacity; }
        kids.push(h("rect", attrs, h("title", null, tip)));
      });
    });
    m.series.forEach(function (s, k) {
      if (s.trace.type !== "scatter" || m.horizontal) { return; }
      var pts = s.points.filter(function (p) { return p.value !== null; }).map(function (p) {
        return {x: left + (p.cat + 0.5) * band, y: topPad + ph - scale(p.value), p: p};
      });
      var dash = {dot: "2,3", dash: "6,4", dashdot: "6,3,2,3"}[s.line.dash];
      kids.push(h("polyline", {key: "l" + k, points: pts.map(function (q) { return q.x + "," + q.y; }).join(" "),
                               fill: "none", stroke: s.colour, strokeWidth: 2, strokeDasharray: dash}));
      if (s.mode.indexOf("markers") >= 0) {
        pts.forEach(function (q, i) {
          kids.push(h("circle", {key: "m" + k + "-" + i, cx: q.x, cy: q.y, r: 3, fill: s.colour, className: "chart-point"},
                      h("title", null, catTips[q.p.cat] + ", " + s.name + ": " + fmt(q.p.value))));
        });
      }
    });
    return kids;
  }

  function legend(h, m) {
    var items = m.series.map(function (s, k) {
      var swatch = s.trace.type === "bar"
        ? h("span", {className: "chart-swatch", style: {background: s.colour}})
        : h("span", {className: "chart-swatch chart-swatch-line", style: {borderTopColor: s.colour}});
      return h("span", {key: k, className: "chart-legend-item"}, swatch, h("span", {className: "legendtext"}, s.name));
    });
    if (m.layout.barmode === "stack") { items.reverse(); }   // the last stacked first, as Plotly lists them
    return h("div", {className: "chart-legend"}, items);
  }

  ns.Chart = function Chart(props) {
    var React = window.React, h = React.createElement;
    var ref = React.useRef(null);
    var state = React.useState(0), width = state[0], setWidth = state[1];
    React.useLayoutEffect(function () {
      var el = ref.current;
      var measure = function () { if (el && el.clientWidth) { setWidth(el.clientWidth); } };
      measure();
      if (!window.ResizeObserver) {
        window.addEventListener("resize", measure);
        return function () { window.removeEventListener("resize", measure); };
      }
      var ro = new window.ResizeObserver(measure);
      ro.observe(el);
      return function () { ro.disconnect(); };
    }, []);
    var fig = props.figure || {};
    var m = model(fig);
    var title = titleOf(fig.layout || {});
    var notes = ((fig.layout || {}).annotations || []).map(function (a) { return text(a.text); });
    var empty = !m.series.length;
    var svg = null;
    if (width && !empty) {
      svg = h("svg", {className: "chart-svg", width: width, height: PLOT_HEIGHT, role: "img", "aria-label": title,
                      style: {fontSize: FONT}}, draw(h, m, width));
    }
    return h("div", {id: props.id, className: "chart" + (props.className ? " " + props.className : "")},
      h("div", {className: "chart-title"}, title),
      !empty && notes.length ? h("div", {className: "chart-note"}, notes.join(" ")) : null,
      h("div", {ref: ref, className: "chart-plot" + (empty ? " chart-empty" : ""), style: {height: PLOT_HEIGHT}},
        empty ? h("div", {className: "chart-empty-text"}, notes.join(" ")) : svg),
      empty ? null : legend(h, m));
  };
})();
