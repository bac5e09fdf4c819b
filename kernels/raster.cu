// The embedded simulator's rasteriser on the GPU, batched over images (many
// environments' agent-view and wrist frames in one launch). The host does
// what the CPU renderer does per mesh (transform, back-face culling,
// shading, near-plane clipping, projection) and hands over screen-space
// triangles; this kernel does the per-pixel part: one thread per pixel,
// the background gradient, then every triangle of its image in drawing
// order with the same edge functions and depth test (`z > depth`, so the
// first of equal depths wins), like crates/wmrl-sim/src/raster.rs.
// Edge functions are evaluated directly at the pixel centre (the CPU walks
// them incrementally along a row), so pixels exactly on an edge may differ:
// the parity test allows 0.5% of pixels.
extern "C" __global__ void raster_images(
    const float* __restrict__ tris,          // all images' triangles: x0 y0 z0 x1 y1 z1 x2 y2 z2 (z: 1/depth)
    const unsigned int* __restrict__ colors, // one 0x00RRGGBB per triangle
    const unsigned int* __restrict__ first,  // [images + 1]: image k owns tris[first[k]..first[k+1]]
    const unsigned int* __restrict__ bg,     // [images, 2]: top and bottom colour, 0x00RRGGBB
    int images,
    int width,
    int height,
    unsigned char* __restrict__ out)         // [images, height, width, 3]
{
    long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long per = (long long)width * height;
    if (idx >= per * images) return;
    int img = (int)(idx / per);
    int p = (int)(idx % per);
    int px = p % width, py = p / width;
    // Background: vertical gradient, truncated like the CPU's `as u8`.
    float hgt = (float)(height > 2 ? height : 2) - 1.0f;
    float tt = (float)py / hgt;
    unsigned int top = bg[2 * img], bot = bg[2 * img + 1];
    unsigned char col[3];
    for (int k = 0; k < 3; ++k) {
        float a = (float)((top >> (16 - 8 * k)) & 255u);
        float b = (float)((bot >> (16 - 8 * k)) & 255u);
        col[k] = (unsigned char)(a + (b - a) * tt);
    }
    float depth = 0.0f;
    float fx = (float)px + 0.5f, fy = (float)py + 0.5f;
    for (unsigned int i = first[img]; i < first[img + 1]; ++i) {
        const float* t = tris + 9 * (size_t)i;
        struct { float x0, y0, z0, x1, y1, z1, x2, y2, z2; } s =
            {t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8]};
        unsigned int rgb = colors[i];
        float area = (s.x1 - s.x0) * (s.y2 - s.y0) - (s.y1 - s.y0) * (s.x2 - s.x0);
        if (fabsf(area) < 1e-9f) continue;
        float minx = floorf(fminf(fminf(s.x0, s.x1), s.x2));
        float maxx = ceilf(fmaxf(fmaxf(s.x0, s.x1), s.x2));
        float miny = floorf(fminf(fminf(s.y0, s.y1), s.y2));
        float maxy = ceilf(fmaxf(fmaxf(s.y0, s.y1), s.y2));
        if ((float)px < minx || (float)px >= maxx || (float)py < miny || (float)py >= maxy) continue;
        float inv = 1.0f / area;
        // Barycentric weights as affine functions of the pixel centre.
        float l0 = -(((s.y2 - s.y1) * inv) * fx + (-(s.x2 - s.x1) * inv) * fy
                     + (-(s.x1 * (s.y2 - s.y1) - s.y1 * (s.x2 - s.x1)) * inv));
        float l1 = -(((s.y0 - s.y2) * inv) * fx + (-(s.x0 - s.x2) * inv) * fy
                     + (-(s.x2 * (s.y0 - s.y2) - s.y2 * (s.x0 - s.x2)) * inv));
        float l2 = -(((s.y1 - s.y0) * inv) * fx + (-(s.x1 - s.x0) * inv) * fy
                     + (-(s.x0 * (s.y1 - s.y0) - s.y0 * (s.x1 - s.x0)) * inv));
        if (l0 >= 0.0f && l1 >= 0.0f && l2 >= 0.0f) {
            float z = l0 * s.z0 + l1 * s.z1 + l2 * s.z2;
            if (z > depth) {
                depth = z;
                col[0] = (unsigned char)((rgb >> 16) & 255u);
                col[1] = (unsigned char)((rgb >> 8) & 255u);
                col[2] = (unsigned char)(rgb & 255u);
            }
        }
    }
    unsigned char* o = out + 3 * idx;
    o[0] = col[0]; o[1] = col[1]; o[2] = col[2];
}
