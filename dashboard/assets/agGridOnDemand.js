/* AG Grid's main bundle (dash_ag_grid.min.js, 1.3 MB) only for a page that draws a grid.
 *
 * dashboard/grids.py marks that bundle "dynamic" in dash_ag_grid's _js_dist: Dash still serves it
 * but leaves it out of the page's <script> list, so a page without a grid (the overview) neither
 * fetches nor compiles it. Dash's renderer looks a component up synchronously, as
 * window[namespace][type], so this script puts window.dash_ag_grid.AgGrid there: a component that
 * loads the bundle (once, on its first mount) and then renders the real AgGrid with the same props.
 * Until then it draws an empty box with the grid's class and style. The bundle's other exports
 * (getApi ...) are copied onto this namespace, which stays window.dash_ag_grid, so the element type
 * the renderer sees never changes and a grid is never mounted twice. The bundle's URL, fingerprinted
 * as Dash names the scripts it lists, is in the page's <meta name="jobsight-ag-grid"> (grids.py).
 * The bundle finds its async chunks (async-community.js) from its own script's src, as when it is
 * in the page's list.
 * If the bundle is in the page already (not marked dynamic), this script does nothing. */
(function () {
  "use strict";
  if (window.dash_ag_grid) { return; }
  var React = window.React;
  var ns = {};
  var Real = null;
  var loading = null;

  function load() {
    if (!loading) {
      loading = new Promise(function (resolve, reject) {
        var script = document.createElement("script");
        script.src = document.querySelector("meta[name='jobsight-ag-grid']").content;
        script.onload = function () {
          var lib = window.dash_ag_grid;
          if (!lib || lib === ns || !lib.AgGrid) {
            loading = null;
            reject(new Error("dash_ag_grid.min.js defined no AgGrid"));
            return;
          }
          Object.keys(lib).forEach(function (k) { if (k !== "AgGrid") { ns[k] = lib[k]; } });
          Real = lib.AgGrid;
          if (Real.dashPersistence) { AgGrid.dashPersistence = Real.dashPersistence; }
          window.dash_ag_grid = ns;
          resolve();
        };
        script.onerror = function () {
          loading = null;       // the next grid to mount tries again
          reject(new Error("could not load " + script.src));
        };
        document.head.appendChild(script);
      });
    }
    return loading;
  }

  function AgGrid(props) {
    var state = React.useState(Real ? "ready" : "loading");
    var status = state[0];
    var setStatus = state[1];
    React.useEffect(function () {
      if (Real) { return undefined; }
      var live = true;
      load().then(function () { if (live) { setStatus("ready"); } },
                  function () { if (live) { setStatus("failed"); } });
      return function () { live = false; };
    }, []);
    if (Real) { return React.createElement(Real, props); }
    return React.createElement("div", {className: props.className, style: props.style},
                               status === "failed" ? "The table could not be loaded: reload the page." : null);
  }
  // what the renderer reads off the component class before the bundle is in: it passes
  // dashRenderType to a component that declares it, and persistence follows dashPersistence
  // (the values of dash_ag_grid's own AgGrid)
  AgGrid.dashRenderType = true;
  AgGrid.dashPersistence = {persisted_props: ["selectedRows"], persistence_type: "local"};
  ns.AgGrid = AgGrid;
  window.dash_ag_grid = ns;
})();
