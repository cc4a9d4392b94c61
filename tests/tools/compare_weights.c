/* compare_weights A B TOL: two float32 weight dumps (osdp_gpt --dump-weights)
 * of the same model; prints the largest absolute difference and exits 1 if
 * it exceeds TOL or the files differ in size. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    if (argc != 4) { fprintf(stderr, "usage: compare_weights A B TOL\n"); return 2; }
    FILE *a = fopen(argv[1], "rb"), *b = fopen(argv[2], "rb");
    if (!a || !b) { fprintf(stderr, "compare_weights: cannot open inputs\n"); return 2; }
    double tol = atof(argv[3]), worst = 0;
    long n = 0;
    float x, y;
    for (;;) {
        size_t ra = fread(&x, 4, 1, a), rb = fread(&y, 4, 1, b);
        if (ra != rb) { printf("sizes differ after %ld values\n", n); return 1; }
        if (!ra) break;
        double d = fabs((double)x - (double)y);
        if (!(d <= worst)) worst = d;   /* NaN propagates as failure */
        n++;
    }
    printf("%ld values, max |diff| %.3g\n", n, worst);
    return n > 0 && worst <= tol ? 0 : 1;
}
