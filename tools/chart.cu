// chart.cu — grouped/stacked bar charts, line plots and timelines as PNG files (see chart.h).
//
// Everything is drawn on the CPU into an RGB buffer: rectangles, lines, and text from stb_easy_font, whose
// glyphs are lists of axis-aligned quads (so they scale to any integer size and rotate by 90° exactly).
// stb_image_write saves the buffer. This is the only file that compiles the stb_image_write implementation
// (STB_IMAGE_WRITE_IMPLEMENTATION, with STB_IMAGE_WRITE_STATIC so its symbols stay private to this file).
#include "chart.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#ifndef MM_NO_STB
#define STB_IMAGE_WRITE_STATIC
#define STB_IMAGE_WRITE_IMPLEMENTATION
#include "stb_image_write.h"
#include "stb_easy_font.h"
#endif

namespace {

struct RGB {
    unsigned char r, g, b;
};
const RGB kWhite{255, 255, 255}, kBlack{0, 0, 0}, kAxis{60, 60, 60}, kGrid{225, 225, 225},
    kTextGray{90, 90, 90}, kRef{200, 40, 40};

// A colorblind-friendly palette (Okabe–Ito order, then a few extra tones).
const RGB kPalette[10] = {{0, 114, 178},  {230, 159, 0},  {0, 158, 115},   {204, 121, 167}, {86, 180, 233},
                          {213, 94, 0},   {240, 228, 66}, {100, 100, 100}, {150, 80, 40},   {40, 40, 140}};

// ---- canvas --------------------------------------------------------------------------------------------
struct Canvas {
    int w, h;
    std::vector<unsigned char> px;
    // Drawing is clipped to this rectangle (the whole image unless a plot area is set).
    int cx0 = 0, cy0 = 0, cx1 = 0, cy1 = 0;

    Canvas(int w_, int h_) : w(w_), h(h_), px((size_t)w_ * h_ * 3, 255) { clip_none(); }
    void clip_none() { cx0 = 0, cy0 = 0, cx1 = w, cy1 = h; }
    void clip(int x0, int y0, int x1, int y1) {
        cx0 = std::max(0, x0), cy0 = std::max(0, y0), cx1 = std::min(w, x1), cy1 = std::min(h, y1);
    }
    void set(int x, int y, RGB c) {
        if (x < cx0 || y < cy0 || x >= cx1 || y >= cy1) return;
        unsigned char* p = &px[((size_t)y * w + x) * 3];
        p[0] = c.r, p[1] = c.g, p[2] = c.b;
    }
    // Filled rectangle [x0, x1) × [y0, y1).
    void rect(int x0, int y0, int x1, int y1, RGB c) {
        if (x0 > x1) std::swap(x0, x1);
        if (y0 > y1) std::swap(y0, y1);
        for (int y = std::max(y0, cy0); y < std::min(y1, cy1); y++)
            for (int x = std::max(x0, cx0); x < std::min(x1, cx1); x++) set(x, y, c);
    }
    // A line of the given thickness (Bresenham with a square brush).
    void line(double fx0, double fy0, double fx1, double fy1, RGB c, int thick = 1) {
        int x0 = (int)std::lround(fx0), y0 = (int)std::lround(fy0);
        int x1 = (int)std::lround(fx1), y1 = (int)std::lround(fy1);
        int dx = std::abs(x1 - x0), dy = -std::abs(y1 - y0);
        int sx = x0 < x1 ? 1 : -1, sy = y0 < y1 ? 1 : -1, err = dx + dy;
        int lo = -(thick - 1) / 2, hi = thick / 2;
        for (;;) {
            for (int oy = lo; oy <= hi; oy++)
                for (int ox = lo; ox <= hi; ox++) set(x0 + ox, y0 + oy, c);
            if (x0 == x1 && y0 == y1) break;
            int e2 = 2 * err;
            if (e2 >= dy) err += dy, x0 += sx;
            if (e2 <= dx) err += dx, y0 += sy;
        }
    }
    void dashed_hline(int x0, int x1, int y, RGB c, int thick = 2) {
        for (int x = x0; x < x1; x += 12) rect(x, y - thick / 2, std::min(x + 7, x1), y - thick / 2 + thick, c);
    }
};

// ---- text (stb_easy_font: 1 font unit = `scale` pixels; a line is 12 units, capitals ~7 units tall) ----
enum class Align { Left, Center, Right };

#ifndef MM_NO_STB
int text_width(const std::string& s, int scale) {
    std::vector<char> buf(s.begin(), s.end());
    buf.push_back(0);
    return stb_easy_font_width(buf.data()) * scale;
}
// Draw `s` with its top-left (after alignment) at (x, y); rotated = 90° counter-clockwise (reads bottom-up),
// then (x, y) is the left end of the text's top edge before rotation, i.e. the text runs upwards from y.
void draw_text(Canvas& cv, const std::string& s, int x, int y, int scale, RGB c, Align align = Align::Left,
               bool rotated = false) {
    if (s.empty()) return;
    std::vector<char> buf(s.begin(), s.end());
    buf.push_back(0);
    int w = stb_easy_font_width(buf.data()) * scale;
    int shift = align == Align::Center ? w / 2 : align == Align::Right ? w : 0;
    std::vector<char> verts(s.size() * 400 + 1024);
    int quads = stb_easy_font_print(0, 0, buf.data(), nullptr, verts.data(), (int)verts.size());
    for (int q = 0; q < quads; q++) {
        const float* v0 = reinterpret_cast<const float*>(verts.data() + q * 64);       // top-left vertex
        const float* v2 = reinterpret_cast<const float*>(verts.data() + q * 64 + 32);  // bottom-right vertex
        int qx0 = (int)v0[0] * scale, qy0 = (int)v0[1] * scale;
        int qx1 = (int)v2[0] * scale, qy1 = (int)v2[1] * scale;
        if (!rotated) {
            cv.rect(x - shift + qx0, y + qy0, x - shift + qx1, y + qy1, c);
        } else {
            // (u, v) in text space -> (x + v, y - u): text runs upwards, glyph tops face left.
            cv.rect(x + qy0, y + shift - qx1, x + qy1, y + shift - qx0, c);
        }
    }
}
#else
int text_width(const std::string& s, int scale) { return (int)s.size() * 6 * scale; }
void draw_text(Canvas&, const std::string&, int, int, int, RGB, Align = Align::Left, bool = false) {}
#endif

// ---- axes ----------------------------------------------------------------------------------------------
// "Nice" tick step (1, 2 or 5 × 10^k) giving about `target` intervals over [lo, hi].
double nice_step(double lo, double hi, int target) {
    double raw = (hi - lo) / std::max(1, target);
    if (!(raw > 0)) return 1;
    double mag = std::pow(10.0, std::floor(std::log10(raw)));
    double f = raw / mag;
    double nice = f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10;
    return nice * mag;
}

std::string format_tick(double v, double step) {
    char buf[64];
    if (std::fabs(v) < step * 1e-9) v = 0;
    double av = std::fabs(v);
    if (av != 0 && (av >= 1e6 || av < 1e-3)) {
        snprintf(buf, sizeof buf, "%.3g", v);
    } else {
        int decimals = step >= 1 ? 0 : (int)std::ceil(-std::log10(step) - 1e-9);
        snprintf(buf, sizeof buf, "%.*f", std::min(decimals, 6), v);
    }
    return buf;
}

struct Layout {
    int plot_x0, plot_y0, plot_x1, plot_y1;  // plot area in pixels
};

// Title, subtitle, axis titles; returns the plot area left after them. Leaves `left_reserve` pixels for the
// y tick labels and `bottom_reserve` for the x tick labels.
Layout draw_frame(Canvas& cv, const std::string& title, const std::string& subtitle, const std::string& x_label,
                  const std::string& y_label, int legend_h, int left_reserve, int bottom_reserve) {
    int top = 16;
    if (!title.empty()) {
        draw_text(cv, title, cv.w / 2, top, 3, kBlack, Align::Center);
        top += 3 * 12 + 4;
    }
    if (!subtitle.empty()) {
        draw_text(cv, subtitle, cv.w / 2, top, 2, kTextGray, Align::Center);
        top += 2 * 12 + 4;
    }
    top += legend_h + 10;
    int left = 16;
    if (!y_label.empty()) left += 2 * 12;  // the rotated y-axis title
    Layout L;
    L.plot_x0 = left + left_reserve;
    L.plot_y0 = top;
    L.plot_x1 = cv.w - 30;
    L.plot_y1 = cv.h - 16 - (x_label.empty() ? 0 : 2 * 12 + 6) - bottom_reserve;
    if (!y_label.empty()) {
        int mid = (L.plot_y0 + L.plot_y1) / 2;
        draw_text(cv, y_label, 16, mid, 2, kBlack, Align::Center, true);
    }
    if (!x_label.empty())
        draw_text(cv, x_label, (L.plot_x0 + L.plot_x1) / 2, cv.h - 16 - 2 * 12 + 2, 2, kBlack, Align::Center);
    return L;
}

// Legend as one centered row of [swatch] name entries at height y. Returns its height (0 when empty).
int legend_height(const std::vector<std::string>& names) { return names.size() > 1 ? 2 * 12 : 0; }
void draw_legend(Canvas& cv, const std::vector<std::string>& names, int y, bool as_lines) {
    if (names.size() <= 1) return;
    const int sw = 18, gap = 8, spacing = 28;
    int total = 0;
    for (const auto& n : names) total += sw + gap + text_width(n, 2) + spacing;
    total -= spacing;
    int x = std::max(8, (cv.w - total) / 2);
    for (size_t i = 0; i < names.size(); i++) {
        unsigned char c[3];
        chart_series_color((int)i, c);
        RGB col{c[0], c[1], c[2]};
        if (as_lines) cv.rect(x, y + 8, x + sw, y + 11, col);
        else cv.rect(x, y + 1, x + sw, y + 17, col);
        x += sw + gap;
        draw_text(cv, names[i], x, y + 2, 2, kBlack);
        x += text_width(names[i], 2) + spacing;
    }
}

// Dashed reference lines with optional labels above their right end.
void draw_reference_lines(Canvas& cv, const Layout& L, const std::vector<double>& values,
                          const std::vector<std::string>& labels, const std::vector<double>& pixel_y) {
    for (size_t i = 0; i < values.size(); i++) {
        int y = (int)std::lround(pixel_y[i]);
        if (y < L.plot_y0 || y > L.plot_y1) continue;
        cv.dashed_hline(L.plot_x0, L.plot_x1, y, kRef);
        if (i < labels.size()) draw_text(cv, labels[i], L.plot_x1 - 6, y - 20, 2, kRef, Align::Right);
    }
}

bool save_png(const Canvas& cv, const std::string& path, std::string* error) {
#ifdef MM_NO_STB
    if (error) *error = "charts need stb_image_write.h and stb_easy_font.h (Debian package libstb-dev); "
                        "this build was configured without them";
    (void)cv, (void)path;
    return false;
#else
    if (!stbi_write_png(path.c_str(), cv.w, cv.h, 3, cv.px.data(), cv.w * 3)) {
        if (error) *error = "could not write PNG file '" + path + "'";
        return false;
    }
    return true;
#endif
}

bool fail(std::string* error, const std::string& msg) {
    if (error) *error = msg;
    return false;
}

}  // namespace

void chart_series_color(int i, unsigned char rgb[3]) {
    const RGB& c = kPalette[((i % 10) + 10) % 10];
    rgb[0] = c.r, rgb[1] = c.g, rgb[2] = c.b;
}

// ---- bar chart -----------------------------------------------------------------------------------------
bool write_bar_chart_png(const BarChart& ch, const std::string& path, std::string* error) {
    const size_t G = ch.groups.size(), S = ch.series.size();
    if (G == 0 || S == 0) return fail(error, "bar chart: no groups or no series");
    if (ch.values.size() != S) return fail(error, "bar chart: values must have one row per series");
    for (const auto& row : ch.values)
        if (row.size() != G) return fail(error, "bar chart: every values row needs one value per group");
    if (ch.width < 200 || ch.height < 150) return fail(error, "bar chart: image too small");

    // Value range: the tallest bar (or stack) and the reference lines.
    double top = ch.y_min;
    for (size_t g = 0; g < G; g++) {
        double stack = ch.y_min;
        for (size_t s = 0; s < S; s++) {
            double v = ch.values[s][g];
            if (!std::isfinite(v)) continue;
            if (ch.stacked) stack += v;
            else top = std::max(top, v);
        }
        if (ch.stacked) top = std::max(top, stack);
    }
    for (double r : ch.reference_lines) top = std::max(top, r);
    double y_max = ch.y_max;
    double step = nice_step(ch.y_min, top > ch.y_min ? top : ch.y_min + 1, 6);
    if (!std::isfinite(y_max)) y_max = ch.y_min + std::ceil((top - ch.y_min) / step * 1.08 + 1e-9) * step;
    if (!(y_max > ch.y_min)) y_max = ch.y_min + 1;
    step = nice_step(ch.y_min, y_max, 6);

    Canvas cv(ch.width, ch.height);
    int tick_w = 0;
    for (double v = ch.y_min; v <= y_max + step * 1e-6; v += step)
        tick_w = std::max(tick_w, text_width(format_tick(v, step), 2));
    // Group labels wider than their slot would run into their neighbours: then every other label goes on a
    // second row. The slot's width does not depend on the rows (draw_frame's left and right margins).
    const double plot_w = (ch.width - 30) - (16 + (ch.y_label.empty() ? 0 : 2 * 12) + tick_w + 10);
    bool two_rows = false;
    for (size_t g = 0; g + 1 < G; g++)
        two_rows = two_rows || (text_width(ch.groups[g], 2) + text_width(ch.groups[g + 1], 2)) / 2.0 + 8 > plot_w / G;
    const int row_h = 2 * 12;
    Layout L = draw_frame(cv, ch.title, ch.subtitle, ch.x_label, ch.y_label, legend_height(ch.series),
                          tick_w + 10, 2 * 12 + 8 + (two_rows ? row_h : 0));
    draw_legend(cv, ch.series, L.plot_y0 - legend_height(ch.series) - 6, false);
    auto ypix = [&](double v) {
        return L.plot_y1 - (v - ch.y_min) / (y_max - ch.y_min) * (L.plot_y1 - L.plot_y0);
    };

    // Grid and y ticks.
    for (double v = ch.y_min; v <= y_max + step * 1e-6; v += step) {
        int y = (int)std::lround(ypix(v));
        cv.rect(L.plot_x0, y, L.plot_x1, y + 1, kGrid);
        cv.rect(L.plot_x0 - 5, y, L.plot_x0, y + 1, kAxis);
        draw_text(cv, format_tick(v, step), L.plot_x0 - 8, y - 8, 2, kBlack, Align::Right);
    }

    // Bars: each group gets an equal slot; 80% of it holds the bars.
    const double slot = (double)(L.plot_x1 - L.plot_x0) / G;
    const double inner = slot * 0.8;
    const double bar_w = ch.stacked ? inner * 0.6 : inner / S;
    cv.clip(L.plot_x0, L.plot_y0, L.plot_x1, L.plot_y1 + 1);
    for (size_t g = 0; g < G; g++) {
        double gx0 = L.plot_x0 + slot * g + (slot - (ch.stacked ? bar_w : inner)) / 2;
        double base = ch.y_min;
        for (size_t s = 0; s < S; s++) {
            double v = ch.values[s][g];
            if (!std::isfinite(v)) continue;
            unsigned char c[3];
            chart_series_color((int)s, c);
            RGB col{c[0], c[1], c[2]};
            double x0 = ch.stacked ? gx0 : gx0 + bar_w * s;
            double x1 = x0 + bar_w;
            double lo = ch.stacked ? base : ch.y_min, hi = ch.stacked ? base + v : v;
            int px0 = (int)std::lround(x0) + 1, px1 = (int)std::lround(x1) - 1;
            cv.rect(px0, (int)std::lround(ypix(hi)), px1, (int)std::lround(ypix(lo)), col);
            if (!ch.value_format.empty()) {
                char buf[64];
                snprintf(buf, sizeof buf, ch.value_format.c_str(), v);
                // The largest font (2 or 1) whose label fits the bar's width; above the bar, or inside a
                // stacked segment when it is tall enough.
                int sc = text_width(buf, 2) <= px1 - px0 + 4 ? 2 : 1;
                int cxm = (px0 + px1) / 2;
                if (ch.stacked) {
                    if (ypix(lo) - ypix(hi) >= 10 * sc)
                        draw_text(cv, buf, cxm, (int)std::lround((ypix(lo) + ypix(hi)) / 2) - 4 * sc, sc, kWhite,
                                  Align::Center);
                } else {
                    draw_text(cv, buf, cxm, (int)std::lround(ypix(hi)) - 10 * sc, sc, kBlack, Align::Center);
                }
            }
            if (ch.stacked) base += v;
        }
        if (ch.stacked && !ch.value_format.empty() && base > ch.y_min) {  // the stack's total above it
            char buf[64];
            snprintf(buf, sizeof buf, ch.value_format.c_str(), base - ch.y_min);
            draw_text(cv, buf, (int)std::lround(gx0 + bar_w / 2), (int)std::lround(ypix(base)) - 20, 2, kBlack,
                      Align::Center);
        }
    }
    cv.clip_none();
    std::vector<double> ref_y;
    for (double r : ch.reference_lines) ref_y.push_back(ypix(r));
    draw_reference_lines(cv, L, ch.reference_lines, ch.reference_labels, ref_y);

    // Axes and group labels.
    cv.rect(L.plot_x0, L.plot_y0, L.plot_x0 + 2, L.plot_y1 + 1, kAxis);
    cv.rect(L.plot_x0, L.plot_y1, L.plot_x1, L.plot_y1 + 2, kAxis);
    for (size_t g = 0; g < G; g++)
        draw_text(cv, ch.groups[g], (int)std::lround(L.plot_x0 + slot * (g + 0.5)),
                  L.plot_y1 + 10 + (two_rows && g % 2 ? row_h : 0), 2, kBlack, Align::Center);
    return save_png(cv, path, error);
}

// ---- line plot -----------------------------------------------------------------------------------------
bool write_line_plot_png(const LinePlot& lp, const std::string& path, std::string* error) {
    if (lp.series.empty()) return fail(error, "line plot: no series");
    if (lp.width < 200 || lp.height < 150) return fail(error, "line plot: image too small");
    double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
    for (const LineSeries& s : lp.series) {
        if (s.x.size() != s.y.size()) return fail(error, "line plot: series '" + s.name + "': x and y differ in length");
        for (size_t i = 0; i < s.x.size(); i++) {
            double x = s.x[i], y = s.y[i];
            if (!std::isfinite(x) || !std::isfinite(y) || (lp.log_y && y <= 0)) continue;
            xmin = std::min(xmin, x), xmax = std::max(xmax, x);
            ymin = std::min(ymin, y), ymax = std::max(ymax, y);
        }
    }
    for (double r : lp.reference_lines)
        if (std::isfinite(r) && (!lp.log_y || r > 0)) ymin = std::min(ymin, r), ymax = std::max(ymax, r);
    if (!std::isfinite(xmin) || !std::isfinite(ymin)) return fail(error, "line plot: no finite points");
    if (std::isfinite(lp.x_min)) xmin = lp.x_min;
    if (std::isfinite(lp.x_max)) xmax = lp.x_max;
    if (std::isfinite(lp.y_min)) ymin = lp.y_min;
    if (std::isfinite(lp.y_max)) ymax = lp.y_max;
    if (lp.log_y && (ymin <= 0 || ymax <= 0)) return fail(error, "line plot: log y axis needs positive limits");
    if (!(xmax > xmin)) xmax = xmin + 1;  // one x value: a unit-wide axis
    // Work in transformed y (log10 for a log axis); round the range outwards to ticks.
    auto ty = [&](double y) { return lp.log_y ? std::log10(y) : y; };
    double tmin = ty(ymin), tmax = ty(ymax);
    if (!(tmax > tmin)) tmax = tmin + (lp.log_y ? 1 : std::max(1.0, std::fabs(tmin) * 0.1));
    double ystep = lp.log_y ? std::max(1.0, std::ceil((tmax - tmin) / 8)) : nice_step(tmin, tmax, 6);
    if (!std::isfinite(lp.y_min)) tmin = std::floor(tmin / ystep + 1e-9) * ystep;
    if (!std::isfinite(lp.y_max)) tmax = std::ceil(tmax / ystep - 1e-9) * ystep;
    if (!(tmax > tmin)) tmax = tmin + ystep;
    double xstep = nice_step(xmin, xmax, 8);

    auto ylabel = [&](double t) {
        if (!lp.log_y) return format_tick(t, ystep);
        char buf[32];
        snprintf(buf, sizeof buf, "%g", std::pow(10.0, t));
        return std::string(buf);
    };
    Canvas cv(lp.width, lp.height);
    std::vector<std::string> names;
    for (const LineSeries& s : lp.series) names.push_back(s.name);
    int tick_w = 0;
    double first_ytick = std::ceil(tmin / ystep - 1e-9) * ystep;
    for (double t = first_ytick; t <= tmax + ystep * 1e-6; t += ystep)
        tick_w = std::max(tick_w, text_width(ylabel(t), 2));
    Layout L = draw_frame(cv, lp.title, lp.subtitle, lp.x_label, lp.y_label, legend_height(names), tick_w + 10,
                          2 * 12 + 8);
    draw_legend(cv, names, L.plot_y0 - legend_height(names) - 6, true);
    auto xpix = [&](double x) { return L.plot_x0 + (x - xmin) / (xmax - xmin) * (L.plot_x1 - L.plot_x0); };
    auto ypix = [&](double y) { return L.plot_y1 - (ty(y) - tmin) / (tmax - tmin) * (L.plot_y1 - L.plot_y0); };

    for (double t = first_ytick; t <= tmax + ystep * 1e-6; t += ystep) {
        int y = (int)std::lround(L.plot_y1 - (t - tmin) / (tmax - tmin) * (L.plot_y1 - L.plot_y0));
        cv.rect(L.plot_x0, y, L.plot_x1, y + 1, kGrid);
        cv.rect(L.plot_x0 - 5, y, L.plot_x0, y + 1, kAxis);
        draw_text(cv, ylabel(t), L.plot_x0 - 8, y - 8, 2, kBlack, Align::Right);
    }
    for (double x = std::ceil(xmin / xstep - 1e-9) * xstep; x <= xmax + xstep * 1e-6; x += xstep) {
        int px = (int)std::lround(xpix(x));
        cv.rect(px, L.plot_y0, px + 1, L.plot_y1, kGrid);
        cv.rect(px, L.plot_y1, px + 1, L.plot_y1 + 6, kAxis);
        draw_text(cv, format_tick(x, xstep), px, L.plot_y1 + 10, 2, kBlack, Align::Center);
    }

    std::vector<double> ref_y;
    for (double r : lp.reference_lines) ref_y.push_back(std::isfinite(r) && (!lp.log_y || r > 0) ? ypix(r) : -1e9);
    draw_reference_lines(cv, L, lp.reference_lines, lp.reference_labels, ref_y);
    cv.clip(L.plot_x0, L.plot_y0, L.plot_x1, L.plot_y1);
    for (size_t si = 0; si < lp.series.size(); si++) {
        const LineSeries& s = lp.series[si];
        unsigned char c[3];
        chart_series_color((int)si, c);
        RGB col{c[0], c[1], c[2]};
        bool have_prev = false;
        double px = 0, py = 0;
        for (size_t i = 0; i < s.x.size(); i++) {
            bool ok = std::isfinite(s.x[i]) && std::isfinite(s.y[i]) && (!lp.log_y || s.y[i] > 0);
            if (!ok) {
                have_prev = false;
                continue;
            }
            double x = xpix(s.x[i]), y = ypix(s.y[i]);
            if (have_prev) cv.line(px, py, x, y, col, 2);
            if (lp.markers) cv.rect((int)x - 3, (int)y - 3, (int)x + 4, (int)y + 4, col);
            px = x, py = y, have_prev = true;
        }
        if (s.x.size() == 1 && !lp.markers) cv.rect((int)px - 2, (int)py - 2, (int)px + 3, (int)py + 3, col);
    }
    cv.clip_none();
    cv.rect(L.plot_x0, L.plot_y0, L.plot_x0 + 2, L.plot_y1 + 1, kAxis);
    cv.rect(L.plot_x0, L.plot_y1, L.plot_x1, L.plot_y1 + 2, kAxis);
    return save_png(cv, path, error);
}

// ---- timeline ------------------------------------------------------------------------------------------
bool write_timeline_png(const TimelineChart& tc, const std::string& path, std::string* error) {
    if (tc.rows.empty()) return fail(error, "timeline: no rows");
    if (tc.width < 300 || tc.row_height < 12) return fail(error, "timeline: image too small");
    double xmin = INFINITY, xmax = -INFINITY;
    for (const TimelineBox& b : tc.boxes) {
        if (b.row < 0 || b.row >= (int)tc.rows.size()) return fail(error, "timeline: a box names a row that does not exist");
        if (!(b.t1 >= b.t0)) return fail(error, "timeline: a box ends before it starts");
        xmin = std::min(xmin, b.t0), xmax = std::max(xmax, b.t1);
    }
    if (std::isfinite(tc.x_min)) xmin = tc.x_min;
    if (std::isfinite(tc.x_max)) xmax = tc.x_max;
    if (!std::isfinite(xmin)) xmin = 0, xmax = 1;  // no boxes: an empty axis
    if (!(xmax > xmin)) xmax = xmin + 1;
    const double xstep = nice_step(xmin, xmax, 10);

    int label_w = 0;
    for (const std::string& r : tc.rows) label_w = std::max(label_w, text_width(r, 2));
    const int legend_h = legend_height(tc.legend);
    const int head = 16 + (tc.title.empty() ? 0 : 3 * 12 + 4) + (tc.subtitle.empty() ? 0 : 2 * 12 + 4) + legend_h + 10;
    const int height = head + (int)tc.rows.size() * tc.row_height + 2 * 12 + 8 + (tc.x_label.empty() ? 0 : 2 * 12 + 6) + 16;
    Canvas cv(tc.width, height);
    Layout L = draw_frame(cv, tc.title, tc.subtitle, tc.x_label, "", legend_h, label_w + 12, 2 * 12 + 8);
    draw_legend(cv, tc.legend, L.plot_y0 - legend_h - 6, false);  // entry i in palette color i (none for one entry)
    auto xpix = [&](double x) { return L.plot_x0 + (x - xmin) / (xmax - xmin) * (L.plot_x1 - L.plot_x0); };
    for (double x = std::ceil(xmin / xstep - 1e-9) * xstep; x <= xmax + xstep * 1e-6; x += xstep) {
        int px = (int)std::lround(xpix(x));
        cv.rect(px, L.plot_y0, px + 1, L.plot_y1, kGrid);
        cv.rect(px, L.plot_y1, px + 1, L.plot_y1 + 6, kAxis);
        draw_text(cv, format_tick(x, xstep), px, L.plot_y1 + 10, 2, kBlack, Align::Center);
    }
    const double row_h = (double)(L.plot_y1 - L.plot_y0) / tc.rows.size();
    for (size_t r = 0; r < tc.rows.size(); r++) {
        const int y0 = L.plot_y0 + (int)std::lround(row_h * r);
        draw_text(cv, tc.rows[r], L.plot_x0 - 10, y0 + (int)row_h / 2 - 8, 2, kBlack, Align::Right);
        if (r > 0) cv.rect(L.plot_x0, y0, L.plot_x1, y0 + 1, kGrid);
    }
    cv.clip(L.plot_x0, L.plot_y0, L.plot_x1, L.plot_y1);
    for (const TimelineBox& b : tc.boxes) {
        unsigned char c[3];
        chart_series_color(b.color, c);
        const RGB col{c[0], c[1], c[2]};
        const int y0 = L.plot_y0 + (int)std::lround(row_h * b.row) + 4, y1 = L.plot_y0 + (int)std::lround(row_h * (b.row + 1)) - 4;
        // At least one pixel wide, with a white seam between touching boxes.
        const int x0 = (int)std::lround(xpix(b.t0)), x1 = std::max(x0 + 1, (int)std::lround(xpix(b.t1)) - 1);
        cv.rect(x0, y0, x1, y1, col);
        // The largest font (2 or 1) whose label fits the box.
        for (int sc = 2; sc >= 1 && !b.label.empty(); sc--) {
            if (text_width(b.label, sc) + 4 > x1 - x0 || 8 * sc > y1 - y0) continue;
            draw_text(cv, b.label, (x0 + x1) / 2, (y0 + y1) / 2 - 4 * sc, sc, kWhite, Align::Center);
            break;
        }
    }
    cv.clip_none();
    cv.rect(L.plot_x0, L.plot_y0, L.plot_x0 + 2, L.plot_y1 + 1, kAxis);
    cv.rect(L.plot_x0, L.plot_y1, L.plot_x1, L.plot_y1 + 2, kAxis);
    return save_png(cv, path, error);
}
