// chart.h — small PNG charts written by the project itself: grouped (or stacked) bar charts, line plots and
// timelines.
//
// No Python, no matplotlib: pixels are drawn into an RGB buffer, text with stb_easy_font (a tiny bitmap
// font made of rectangles), and the image is saved with stb_image_write (both from Debian's libstb-dev).
// Used for the paper's Figure 7 (tools/memory_calculator.cu); meant to be reused for loss curves and
// memory-breakdown pictures. Text is ASCII only (the font has no other glyphs).
//
//   BarChart c;
//   c.title = "Activation memory per layer";  c.y_label = "% of TP baseline";
//   c.groups = {"22B", "175B"};  c.series = {"TP+SP", "TP+selective"};
//   c.values = {{66.8, 62.0}, {49.4, 56.5}};          // values[series][group]
//   std::string err;
//   if (!write_bar_chart_png(c, "fig.png", &err)) fprintf(stderr, "%s\n", err.c_str());
#pragma once
#include <cmath>
#include <string>
#include <vector>

struct BarChart {
    std::string title;                        // top line (may be empty)
    std::string subtitle;                     // second, smaller line (may be empty)
    std::string x_label, y_label;             // axis titles (may be empty)
    std::vector<std::string> groups;          // categories along x
    std::vector<std::string> series;          // one color each; shown in the legend
    std::vector<std::vector<double>> values;  // values[series][group]; NaN = no bar
    bool stacked = false;                     // stack the series of a group into one bar (e.g. memory breakdown)
    double y_min = 0;                         // bars start at y_min
    double y_max = NAN;                       // NaN: automatic (a "nice" value above the largest bar)
    std::vector<double> reference_lines;      // dashed horizontal lines, e.g. 100 for "= baseline"
    std::vector<std::string> reference_labels;  // optional text at the right end of each reference line
    std::string value_format = "%.1f";        // printf format of the label above each bar; "" = no labels
    int width = 1100, height = 620;           // pixels
};

struct LineSeries {
    std::string name;       // legend entry
    std::vector<double> x;  // same length as y; non-finite points break the line
    std::vector<double> y;
};

struct LinePlot {
    std::string title, subtitle;
    std::string x_label, y_label;
    std::vector<LineSeries> series;
    bool log_y = false;                     // logarithmic y axis (positive values only)
    double x_min = NAN, x_max = NAN;        // NaN: from the data
    double y_min = NAN, y_max = NAN;        // NaN: from the data (rounded outwards to ticks)
    std::vector<double> reference_lines;    // dashed horizontal lines
    std::vector<std::string> reference_labels;  // optional text at the right end of each reference line
    bool markers = false;                   // draw a small square at every point
    int width = 1100, height = 620;
};

// A timeline (Gantt chart): one row per lane, boxes along a time axis (tools/draw_pipeline: the pipeline's
// stages and their forward / backward ops). Space without a box stays blank.
struct TimelineBox {
    int row;            // index into rows
    double t0, t1;      // on the time axis
    int color;          // palette index (chart_series_color)
    std::string label;  // drawn inside when it fits (may be empty)
};
struct TimelineChart {
    std::string title, subtitle;
    std::string x_label = "time";
    std::vector<std::string> rows;    // top to bottom
    std::vector<TimelineBox> boxes;
    std::vector<std::string> legend;  // legend[i] names palette color i (fewer than two: no legend)
    double x_min = NAN, x_max = NAN;  // NaN: from the boxes
    int width = 1400, row_height = 44;  // the height follows from the rows
};

// Write the chart as an RGB PNG. On failure (bad input, file not writable, built without libstb-dev)
// returns false and, when `error` is not null, says why.
bool write_bar_chart_png(const BarChart& chart, const std::string& path, std::string* error = nullptr);
bool write_line_plot_png(const LinePlot& plot, const std::string& path, std::string* error = nullptr);
bool write_timeline_png(const TimelineChart& chart, const std::string& path, std::string* error = nullptr);

// The color of series i (a fixed palette of 10, repeating): RGB bytes.
void chart_series_color(int i, unsigned char rgb[3]);
