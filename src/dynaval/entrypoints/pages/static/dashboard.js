// Draws the dashboard's charts with the vendored Chart.js. Each chart reads its data from a
// <script type="application/json"> element rendered by the server; nothing is fetched.
(function () {
  "use strict";

  function data(id) {
    var element = document.getElementById(id);
    return element ? JSON.parse(element.textContent) : null;
  }

  function canvas(testId) {
    return document.querySelector('canvas[data-testid="' + testId + '"]');
  }

  function roundsChart() {
    var target = canvas("rounds-chart");
    var d = data("rounds-chart-data");
    if (!target || !d) return;
    new Chart(target, {
      type: "line",
      data: {
        labels: d.labels,
        datasets: [
          {
            type: "bar", label: "α 95% CI", order: 3, barPercentage: 0.15, categoryPercentage: 1,
            backgroundColor: "rgba(37, 99, 235, 0.18)", borderColor: "rgba(37, 99, 235, 0.45)", borderWidth: 1,
            data: d.ci_low.map(function (low, i) {
              var high = d.ci_high[i];
              return low === null || high === null ? null : [low, high];
            })
          },
          { label: "Krippendorff's α", order: 1, data: d.alpha, borderColor: "#1d4ed8", backgroundColor: "#1d4ed8", tension: 0.2 },
          {
            label: "VMER", order: 2, data: d.vmer, borderColor: "#16a34a", backgroundColor: "#16a34a",
            borderDash: [6, 4], tension: 0.2
          }
        ]
      },
      options: {
        maintainAspectRatio: false,
        interaction: { mode: "index", intersect: false },
        scales: {
          x: { offset: true },
          y: { suggestedMin: 0, suggestedMax: 1, title: { display: true, text: "α, VMER" } }
        },
        plugins: {
          tooltip: {
            callbacks: {
              label: function (ctx) {
                var raw = ctx.raw;
                if (Array.isArray(raw)) return ctx.dataset.label + ": " + raw[0].toFixed(3) + " to " + raw[1].toFixed(3);
                return ctx.dataset.label + ": " + (raw === null || raw === undefined ? "—" : raw.toFixed(3));
              }
            }
          }
        }
      }
    });
  }

  function annotatorsChart() {
    var target = canvas("annotators-chart");
    var d = data("annotators-chart-data");
    if (!target || !d) return;
    new Chart(target, {
      type: "bar",
      data: {
        labels: d.labels,
        datasets: [
          { label: "Agreement with the others", data: d.agreement, backgroundColor: "#3b82f6" },
          { label: "Gold accuracy", data: d.gold_accuracy, backgroundColor: "#f59e0b" }
        ]
      },
      options: {
        maintainAspectRatio: false,
        scales: { y: { min: 0, max: 1 } }
      }
    });
  }

  function healthCharts() {
    var d = data("health-chart-data");
    if (!d) return;
    var colours = { writers: "#6366f1", diversity: "#0ea5e9", fooled: "#f59e0b" };
    var roundTarget = canvas("health-round-chart");
    if (roundTarget) {
      new Chart(roundTarget, {
        type: "bar",
        data: {
          labels: d.round.labels,
          datasets: [{
            label: "This round", data: d.round.values,
            backgroundColor: d.round.groups.map(function (g) { return colours[g]; })
          }]
        },
        options: { maintainAspectRatio: false, plugins: { legend: { display: false } }, scales: { y: { min: 0, max: 1 } } }
      });
    }
    var clustersTarget = canvas("health-clusters-chart");
    if (clustersTarget) {
      new Chart(clustersTarget, {
        type: "bar",
        data: {
          labels: d.clusters.labels,
          datasets: [
            { label: "Candidates", data: d.clusters.sizes, backgroundColor: "#6366f1" },
            { label: "Fooled", data: d.clusters.fooled, backgroundColor: "#f59e0b" }
          ]
        },
        options: { maintainAspectRatio: false, scales: { y: { beginAtZero: true, ticks: { precision: 0 } } } }
      });
    }
    var trendTarget = canvas("health-trend-chart");
    if (trendTarget) {
      new Chart(trendTarget, {
        type: "line",
        data: {
          labels: d.trend.labels,
          datasets: [
            {
              label: "MER", data: d.trend.mer, borderColor: "#dc2626", backgroundColor: "#dc2626", tension: 0.2,
              pointRadius: d.trend.inflation.map(function (marked) { return marked ? 7 : 3; }),
              pointStyle: d.trend.inflation.map(function (marked) { return marked ? "triangle" : "circle"; })
            },
            { label: "VMER", data: d.trend.vmer, borderColor: "#16a34a", backgroundColor: "#16a34a", borderDash: [6, 4], tension: 0.2 },
            { label: "Krippendorff's α", data: d.trend.alpha, borderColor: "#1d4ed8", backgroundColor: "#1d4ed8", tension: 0.2 },
            { label: "Distinct-2", data: d.trend.diversity, borderColor: "#0ea5e9", backgroundColor: "#0ea5e9", tension: 0.2 }
          ]
        },
        options: {
          maintainAspectRatio: false,
          interaction: { mode: "index", intersect: false },
          scales: { x: { offset: true }, y: { suggestedMin: 0, suggestedMax: 1 } }
        }
      });
    }
  }

  document.addEventListener("DOMContentLoaded", function () {
    roundsChart();
    annotatorsChart();
    healthCharts();
  });
})();
